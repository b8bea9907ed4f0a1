// Shared by every op (after the op's constants, before its own file). Each op file declares
// `const WG: u32` (its workgroup size) and a `P` struct of u32 parameters whose last field is
// `groups`, the number of workgroups the dispatch means (the grid is laid out over x and y).

var<workgroup> red: array<f32, WG>;

// The dispatch's linear workgroup index.
fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// Sum of `v` over the workgroup (every invocation gets it). Call in uniform control flow.
fn wg_sum(li: u32, v: f32) -> f32 {
    red[li] = v;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (li < k) {
            red[li] += red[li + k];
        }
        workgroupBarrier();
    }
    let s = red[0];
    workgroupBarrier();
    return s;
}

// Maximum of `v` over the workgroup.
fn wg_max(li: u32, v: f32) -> f32 {
    red[li] = v;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (li < k) {
            red[li] = max(red[li], red[li + k]);
        }
        workgroupBarrier();
    }
    let s = red[0];
    workgroupBarrier();
    return s;
}

// tanh that stays finite for large arguments on every driver.
fn tanh_safe(z: f32) -> f32 {
    if (abs(z) > 15.0) {
        return sign(z);
    }
    return tanh(z);
}

fn silu(x: f32) -> f32 {
    return x / (1.0 + exp(-x));
}

// GELU, tanh approximation (ggml's `gelu`), as x · sigmoid(2z) = 0.5 x (1 + tanh z): exp is
// accurate near 0 where 1 + tanh(z) from a driver's tanh is not.
fn gelu(x: f32) -> f32 {
    let z = 0.7978845608028654 * x * (1.0 + 0.044715 * x * x);
    return x / (1.0 + exp(-2.0 * z));
}

// f32 to f16 bits, rounded to nearest even (as the CPU's conversion rounds; WGSL's own
// conversion may round either way).
fn f16_bits(f: f32) -> u32 {
    let x = bitcast<u32>(f);
    let sign = (x >> 16u) & 0x8000u;
    let a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) {
        return sign | 0x7c00u | select(0u, 0x200u, a > 0x7f800000u);
    }
    if (a >= 0x477ff000u) {
        return sign | 0x7c00u;
    }
    if (a < 0x38800000u) {
        // a subnormal half: |f| · 2^24 is exact, and round() rounds half to even
        return sign | u32(round(bitcast<f32>(a) * 16777216.0));
    }
    var h = (((a >> 23u) - 112u) << 10u) | ((a >> 13u) & 0x3ffu);
    let rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) == 1u)) {
        h += 1u;
    }
    return sign | h;
}

// A row of up to 512 values in workgroup memory (a query, an output row, a KV row to store),
// for the ops that transform a whole row together.
var<workgroup> rowbuf: array<f32, 512>;

// The normalized Walsh–Hadamard transform of each block of n (a power of two) of the first
// `len` values of `rowbuf`, as the CPU's `fwht` computes it: butterflies h = 1, 2, ... then a
// multiply by s = 1/√n (given by the host, so it is the CPU's f32). Every invocation calls it
// (it synchronizes); n = 0 leaves the row as it is.
fn fwht_row(len: u32, n: u32, s: f32, li: u32) {
    for (var h = 1u; h < n; h *= 2u) {
        for (var q = li; q < len / 2u; q += WG) {
            let i = (q / h) * 2u * h + q % h;
            let u = rowbuf[i];
            let v = rowbuf[i + h];
            rowbuf[i] = u + v;
            rowbuf[i + h] = u - v;
        }
        workgroupBarrier();
    }
    if (n > 0u) {
        for (var i = li; i < len; i += WG) {
            rowbuf[i] = rowbuf[i] * s;
        }
    }
    workgroupBarrier();
}

// RoPE of element i of a head (of its first 2 · half, which rotate): .x the element it pairs
// with (NeoX pairs (k, k + half), else (2k, 2k + 1)), .y the pair k, .z 1 when i is the pair's
// second.
fn rope_of(i: u32, half: u32, neox: bool) -> vec3<u32> {
    if (neox) {
        if (i < half) {
            return vec3<u32>(i + half, i, 0u);
        }
        return vec3<u32>(i - half, i - half, 1u);
    }
    return vec3<u32>(i ^ 1u, i / 2u, i & 1u);
}

// Element x rotated with its pair's y by (cos, sin) c: a pair's first x·cos − y·sin, its
// second y·sin + x·cos.
fn rope_rot(x: f32, y: f32, c: vec2<f32>, second: bool) -> f32 {
    if (second) {
        return y * c.y + x * c.x;
    }
    return x * c.x - y * c.y;
}
