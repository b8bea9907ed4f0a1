// out[t][n] (+)= w[n] · x[t] through cooperative matrices (tensor cores): each workgroup
// computes TM tokens × TN rows, each of its four subgroups a 32 × 32 quadrant of them as 2 × 2
// products of 16 × 16 f16 matrices accumulated in f32. Per step of TK columns the workgroup
// dequantizes the weight tile and converts the input tile to f16 into workgroup memory (every
// invocation a share), then the subgroups multiply from there; the results go through
// workgroup memory to `store_out` (rows of up to three concatenated weights: see out.wgsl).
// The constants (`WG`: four subgroups, `COOP_WLOAD16`) and the `enable` directives come from
// the host.
const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 32u;
struct P {
    k: u32, n: u32, rb: u32, t: u32, row0: u32, acc: u32, n0: u32, n1: u32, n2: u32,
    splits: u32, kchunk: u32, groups: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> o0: array<f32>;
@group(0) @binding(4) var<storage, read_write> o1: array<f32>;
@group(0) @binding(5) var<storage, read_write> o2: array<f32>;

// Sixteens where the format has them and the host asks (`COOP_WLOAD16`, from its defs).
const W16: bool = HAS_WLOAD16 && COOP_WLOAD16;

var<workgroup> xa: array<f16, 2048>; // A = the input tile, [TM][TK] row-major
var<workgroup> wb: array<f16, 2048>; // B = the weight tile (k × rows), [TN][TK]: column-major
var<workgroup> cs: array<f32, 4096>; // C, [TM][TN] row-major

// Columns e..e+3 of weight row n (zero past the edges).
fn load_w(n: u32, e: u32) -> vec4<f32> {
    if (n >= p.n || e >= p.k) {
        return vec4<f32>(0.0);
    }
    let m = (vec4<u32>(e) + vec4<u32>(0u, 1u, 2u, 3u)) < vec4<u32>(p.k);
    return select(vec4<f32>(0.0), wload4(n * p.rb, e), m);
}

// Columns e..e+3 of token t's input (zero past the edges).
fn load_x(t: u32, e: u32) -> vec4<f32> {
    if (t >= p.t || e >= p.k) {
        return vec4<f32>(0.0);
    }
    let b = t * p.k + e;
    if (e + 3u < p.k) {
        return vec4<f32>(x[b], x[b + 1u], x[b + 2u], x[b + 3u]);
    }
    var v = vec4<f32>(0.0);
    for (var j = 0u; e + j < p.k; j++) {
        v[j] = x[b + j];
    }
    return v;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32, @builtin(subgroup_id) sg: u32) {
    // (no early return past `groups`: the cooperative ops need uniform control flow; such a
    // workgroup's tile starts past the last token, so it loads zeros and stores nothing)
    let g = group_index(wid, nwg);
    let nb = (p.n + TN - 1u) / TN;
    let t0 = (g / nb) * TM;
    let n0 = (g % nb) * TN;
    // this subgroup's quadrant
    let qm = (sg / 2u) * 32u;
    let qn = (sg % 2u) * 32u;
    for (var i = li; i < TM * TN; i += WG) {
        cs[i] = 0.0;
    }
    workgroupBarrier();
    var c00 = coopLoadT<coop_mat16x16<f32, C>>(&cs[qm * TN + qn], TN);
    var c01 = c00;
    var c10 = c00;
    var c11 = c00;
    for (var k0 = 0u; k0 < p.k; k0 += TK) {
        // the tiles: TM × TK inputs and TN × TK weights, in fours; with W16, weights of
        // super-block formats in sixteens (`wload16`: their sub-block's scale decoded once, not
        // four times; their rows are whole blocks, so a sixteen is all inside or all past it)
        for (var v = li; v < TM * TK / 4u; v += WG) {
            let r = v / (TK / 4u);
            let c = (v % (TK / 4u)) * 4u;
            let xv = load_x(t0 + r, k0 + c);
            for (var j = 0u; j < 4u; j++) {
                xa[r * TK + c + j] = f16(xv[j]);
            }
            if (!W16) {
                let wv = load_w(n0 + r, k0 + c);
                for (var j = 0u; j < 4u; j++) {
                    wb[r * TK + c + j] = f16(wv[j]);
                }
            }
        }
        if (W16) {
            for (var v = li; v < TN * TK / 16u; v += WG) {
                let r = v / (TK / 16u);
                let c = (v % (TK / 16u)) * 16u;
                var wm = mat4x4<f32>();
                if (n0 + r < p.n && k0 + c < p.k) {
                    wm = wload16((n0 + r) * p.rb, k0 + c);
                }
                for (var q = 0u; q < 4u; q++) {
                    let wv = wm[q];
                    for (var j = 0u; j < 4u; j++) {
                        wb[r * TK + c + 4u * q + j] = f16(wv[j]);
                    }
                }
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk += 16u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xa[qm * TK + kk], TK);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xa[(qm + 16u) * TK + kk], TK);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&wb[qn * TK + kk], TK);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&wb[(qn + 16u) * TK + kk], TK);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
        }
        workgroupBarrier();
    }
    coopStoreT(c00, &cs[qm * TN + qn], TN);
    coopStoreT(c01, &cs[qm * TN + qn + 16u], TN);
    coopStoreT(c10, &cs[(qm + 16u) * TN + qn], TN);
    coopStoreT(c11, &cs[(qm + 16u) * TN + qn + 16u], TN);
    workgroupBarrier();
    for (var i = li; i < TM * TN; i += WG) {
        let t = t0 + i / TN;
        let n = n0 + i % TN;
        if (t < p.t && n < p.n) {
            store_out(t, p.row0 + n, cs[i]);
        }
    }
}
