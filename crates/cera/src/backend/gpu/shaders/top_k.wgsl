// The k largest values of each row with their columns, largest first, ties to the lower
// column (the CPU's argmax keeps the first maximum). Two dispatches (`FINAL` from the defs):
//   1. one workgroup per (row, chunk of columns): the chunk's top k into `part`
//      ([rows][chunks][k] pairs of (column, value bits); a chunk with fewer than k columns
//      pads with (NONE, 0));
//   2. one workgroup per row: the top k of its chunks' candidates into `dst` ([rows][k]).
// Each round finds the best remaining item by a workgroup reduction and marks it taken (a bit
// per item in the invocation's mask: at most 32 items per invocation, which the host's chunk
// sizes keep to).
// Values rank by an order-preserving map of their bits to u32 (NaN lowest), so -inf and NaN
// logits (banned tokens) need no float compares.
const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;
struct P { cols: u32, k: u32, chunks: u32, chunk: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
// stage 1's input: [rows][cols] f32 (stage 2 binds a placeholder)
@group(0) @binding(1) var<storage, read> src: array<f32>;
// stage 1's output, stage 2's input
@group(0) @binding(2) var<storage, read_write> part: array<u32>;
// stage 2's output (stage 1 binds a placeholder)
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;

var<workgroup> rk: array<u32, WG>;
var<workgroup> ri: array<u32, WG>;

// Larger first; among equal keys the lower column.
fn better(k: u32, i: u32, bk: u32, bi: u32) -> bool {
    return k > bk || (k == bk && i < bi);
}

fn rank_key(bits: u32) -> u32 {
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return 0u;
    }
    return select(bits | 0x80000000u, ~bits, (bits & 0x80000000u) != 0u);
}

// Item j of this workgroup's list: (key, column, value bits); NONE past the end.
fn item(row: u32, chunk: u32, j: u32) -> vec3<u32> {
    if (FINAL) {
        if (j >= p.chunks * p.k) {
            return vec3<u32>(0u, NONE, 0u);
        }
        let at = (row * p.chunks * p.k + j) * 2u;
        let col = part[at];
        let bits = part[at + 1u];
        return vec3<u32>(select(rank_key(bits), 0u, col == NONE), col, bits);
    }
    let col = chunk * p.chunk + j;
    if (j >= p.chunk || col >= p.cols) {
        return vec3<u32>(0u, NONE, 0u);
    }
    let bits = bitcast<u32>(src[row * p.cols + col]);
    return vec3<u32>(rank_key(bits), col, bits);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = group_index(wid, nwg);
    if (g >= p.groups) {
        return;
    }
    var row = g;
    var chunk = 0u;
    var n = p.chunks * p.k;
    if (!FINAL) {
        row = g / p.chunks;
        chunk = g % p.chunks;
        n = p.chunk;
    }
    var taken = 0u;
    // this invocation's best remaining item, found again only after it was taken
    var bk = 0u;
    var bi = NONE;
    var bb = 0u;
    var bj = 32u;
    var stale = true;
    for (var r = 0u; r < p.k; r++) {
        if (stale) {
            // (its items go up by column, so the first of equal keys is the lowest column)
            bk = 0u;
            bi = NONE;
            bb = 0u;
            bj = 32u;
            var s = 0u;
            for (var j = li; j < n; j += WG) {
                if ((taken & (1u << s)) == 0u) {
                    let it = item(row, chunk, j);
                    if (better(it.x, it.y, bk, bi)) {
                        bk = it.x;
                        bi = it.y;
                        bb = it.z;
                        bj = s;
                    }
                }
                s++;
            }
            stale = false;
        }
        rk[li] = bk;
        ri[li] = bi;
        workgroupBarrier();
        for (var h = WG / 2u; h > 0u; h >>= 1u) {
            if (li < h && better(rk[li + h], ri[li + h], rk[li], ri[li])) {
                rk[li] = rk[li + h];
                ri[li] = ri[li + h];
            }
            workgroupBarrier();
        }
        let win = ri[0];
        // the winner's owner marks it and writes it out (NONE: the list ran out; slot padded)
        if (win != NONE && win == bi && bj < 32u) {
            taken |= 1u << bj;
            stale = true;
            let at = select((g * p.k + r) * 2u, (row * p.k + r) * 2u, FINAL);
            if (FINAL) {
                dst[at] = win;
                dst[at + 1u] = bb;
            } else {
                part[at] = win;
                part[at + 1u] = bb;
            }
        }
        if (win == NONE && li == 0u) {
            let at = select((g * p.k + r) * 2u, (row * p.k + r) * 2u, FINAL);
            if (FINAL) {
                dst[at] = NONE;
                dst[at + 1u] = 0u;
            } else {
                part[at] = NONE;
                part[at + 1u] = 0u;
            }
        }
        workgroupBarrier();
    }
}
