// Stores one sequence's keys (or values): word wd of head h of token t goes to the cache at
// [h][pos0 + t][wd], as f32 (type 0) or as two f16 rounded to nearest even (type 1).
const WG: u32 = 256u;
struct P { total: u32, row0: u32, pos0: u32, h: u32, d: u32, words: u32, n_ctx: u32, f16: u32, src_cols: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> cache: array<u32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = group_index(wid, nwg) * WG + li;
    if (i >= p.total) {
        return;
    }
    let wd = i % p.words;
    let h = (i / p.words) % p.h;
    let t = i / (p.words * p.h);
    let s = (p.row0 + t) * p.src_cols + h * p.d;
    let dst = (h * p.n_ctx + p.pos0 + t) * p.words + wd;
    if (p.f16 != 0u) {
        cache[dst] = f16_bits(src[s + 2u * wd]) | (f16_bits(src[s + 2u * wd + 1u]) << 16u);
    } else {
        cache[dst] = bitcast<u32>(src[s + wd]);
    }
}
