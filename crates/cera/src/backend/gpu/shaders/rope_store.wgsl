// One sequence's RoPE and cache store in one dispatch (what rope.wgsl and kv_store.wgsl do in
// two): invocations [0, total_q) rotate query pairs in place as rope.wgsl does (every row of
// `q`; the (cos, sin) table has a row per tensor row); the next
// total_k store key words, rotating the elements a word holds as they are read from `k`
// (which stays as it was: only the cache is read after); the next total_v store value words.
// Words go to [h][pos0 + t][wd] as f32 (type 0) or two f16 rounded to nearest even (type 1).
const WG: u32 = 256u;
struct P {
    total_q: u32, total_k: u32, total_v: u32, heads_q: u32, head_dim: u32, half: u32,
    neox: u32, cols_q: u32, row0: u32, pos0: u32, h: u32, n_ctx: u32, kwords: u32, kty: u32,
    kcols: u32, vd: u32, vwords: u32, vty: u32, vcols: u32, groups: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> cs: array<vec2<f32>>;
@group(0) @binding(5) var<storage, read_write> kc: array<u32>;
@group(0) @binding(6) var<storage, read_write> vc: array<u32>;

// Element i of the key head starting at `base` of table row r, rotated (elements past the
// rotated dims, 2 · half, as they are).
fn key(base: u32, i: u32, r: u32) -> f32 {
    let x = k[base + i];
    if (i >= 2u * p.half) {
        return x;
    }
    let e = rope_of(i, p.half, p.neox != 0u);
    return rope_rot(x, k[base + e.x], cs[r * p.half + e.y], e.z == 1u);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = group_index(wid, nwg) * WG + li;
    if (i < p.total_q) {
        let kk = i % p.half;
        let hh = (i / p.half) % p.heads_q;
        let r = i / (p.half * p.heads_q);
        let base = r * p.cols_q + hh * p.head_dim;
        var e = vec2<u32>(base + 2u * kk, base + 2u * kk + 1u);
        if (p.neox != 0u) {
            e = vec2<u32>(base + kk, base + kk + p.half);
        }
        let c = cs[r * p.half + kk];
        let x0 = q[e.x];
        let x1 = q[e.y];
        q[e.x] = x0 * c.x - x1 * c.y;
        q[e.y] = x0 * c.y + x1 * c.x;
    } else if (i < p.total_q + p.total_k) {
        let j = i - p.total_q;
        let wd = j % p.kwords;
        let hh = (j / p.kwords) % p.h;
        let t = j / (p.kwords * p.h);
        let r = p.row0 + t;
        let base = r * p.kcols + hh * p.head_dim;
        let at = (hh * p.n_ctx + p.pos0 + t) * p.kwords + wd;
        if (p.kty != 0u) {
            kc[at] = f16_bits(key(base, 2u * wd, r)) | (f16_bits(key(base, 2u * wd + 1u, r)) << 16u);
        } else {
            kc[at] = bitcast<u32>(key(base, wd, r));
        }
    } else if (i < p.total_q + p.total_k + p.total_v) {
        let j = i - p.total_q - p.total_k;
        let wd = j % p.vwords;
        let hh = (j / p.vwords) % p.h;
        let t = j / (p.vwords * p.h);
        let base = (p.row0 + t) * p.vcols + hh * p.vd;
        let at = (hh * p.n_ctx + p.pos0 + t) * p.vwords + wd;
        if (p.vty != 0u) {
            vc[at] = f16_bits(v[base + 2u * wd]) | (f16_bits(v[base + 2u * wd + 1u]) << 16u);
        } else {
            vc[at] = bitcast<u32>(v[base + wd]);
        }
    }
}
