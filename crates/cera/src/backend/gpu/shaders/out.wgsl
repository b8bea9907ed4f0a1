// The products' output: row `r` of the concatenated weights (n0 rows of the first, n1 of the
// second, n2 of the third) for token t goes to its weight's output, `[t][row]`; added to it
// with `acc`.
fn store_out(t: u32, r: u32, v: f32) {
    if (r < p.n0) {
        let i = t * p.n0 + r;
        o0[i] = select(v, o0[i] + v, p.acc != 0u);
    } else if (r < p.n0 + p.n1) {
        o1[t * p.n1 + r - p.n0] = v;
    } else {
        o2[t * p.n2 + r - p.n0 - p.n1] = v;
    }
}
