// Merges the n_split partial results of attention.wgsl for one query row (token t, head h):
// out = Σ_s acc_s · e^(m_s - M) / Σ_s l_s · e^(m_s - M), M the largest m_s; then the values'
// rotation is undone as in the unsplit path.
const WG: u32 = 64u;
struct P { row0: u32, n_head: u32, dv: u32, n_split: u32, o_cols: u32, vrot_n: u32, vrot_s: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> o: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let th = group_index(wid, nwg);
    if (th >= p.groups) {
        return;
    }
    let t = th / p.n_head;
    let h = th % p.n_head;
    let stride = p.dv + 2u;
    var mx = -3.0e38;
    for (var s = 0u; s < p.n_split; s++) {
        mx = max(mx, part[(th * p.n_split + s) * stride]);
    }
    var l = 0.0;
    for (var s = 0u; s < p.n_split; s++) {
        let b = (th * p.n_split + s) * stride;
        l += part[b + 1u] * exp(part[b] - mx);
    }
    for (var dd = li; dd < p.dv; dd += WG) {
        var a = 0.0;
        for (var s = 0u; s < p.n_split; s++) {
            let b = (th * p.n_split + s) * stride;
            a += part[b + 2u + dd] * exp(part[b] - mx);
        }
        rowbuf[dd] = a / l;
    }
    workgroupBarrier();
    fwht_row(p.dv, p.vrot_n, bitcast<f32>(p.vrot_s), li);
    for (var dd = li; dd < p.dv; dd += WG) {
        o[(p.row0 + t) * p.o_cols + h * p.dv + dd] = rowbuf[dd];
    }
}
