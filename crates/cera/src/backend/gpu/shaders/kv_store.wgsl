// Stores one sequence's keys and values in one dispatch: word wd of head h of token t goes to
// its cache at [h][pos0 + t][wd], as f32 (type 0) or as two f16 rounded to nearest even
// (type 1). Invocations [0, total_k) store keys, the next total_v values. The defs' `slot` says
// where token t goes: its position and the first words of its sequence's caches in `kc`, `vc`
// (one sequence's: position pos0 + t, words 0; several sequences' caches in shared buffers, a
// token each: the table `seqs`).
const WG: u32 = 256u;
struct P {
    total_k: u32, total_v: u32, row0: u32, pos0: u32, h: u32, n_ctx: u32,
    kd: u32, kwords: u32, kty: u32, kcols: u32, vd: u32, vwords: u32, vty: u32, vcols: u32,
    groups: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> ksrc: array<f32>;
@group(0) @binding(2) var<storage, read> vsrc: array<f32>;
@group(0) @binding(3) var<storage, read_write> kc: array<u32>;
@group(0) @binding(4) var<storage, read_write> vc: array<u32>;

// The cache word `i` of one side (`first`: 1 keys, 2 values): (source index, cache index).
fn place(i: u32, d: u32, words: u32, cols: u32, first: u32) -> vec2<u32> {
    let wd = i % words;
    let h = (i / words) % p.h;
    let t = i / (words * p.h);
    let sl = slot(t);
    return vec2<u32>((p.row0 + t) * cols + h * d, sl[first] + (h * p.n_ctx + sl.x) * words + wd);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = group_index(wid, nwg) * WG + li;
    if (i < p.total_k) {
        let at = place(i, p.kd, p.kwords, p.kcols, 1u);
        let wd = i % p.kwords;
        if (p.kty != 0u) {
            kc[at.y] = f16_bits(ksrc[at.x + 2u * wd]) | (f16_bits(ksrc[at.x + 2u * wd + 1u]) << 16u);
        } else {
            kc[at.y] = bitcast<u32>(ksrc[at.x + wd]);
        }
    } else if (i < p.total_k + p.total_v) {
        let j = i - p.total_k;
        let at = place(j, p.vd, p.vwords, p.vcols, 2u);
        let wd = j % p.vwords;
        if (p.vty != 0u) {
            vc[at.y] = f16_bits(vsrc[at.x + 2u * wd]) | (f16_bits(vsrc[at.x + 2u * wd + 1u]) << 16u);
        } else {
            vc[at.y] = bitcast<u32>(vsrc[at.x + wd]);
        }
    }
}
