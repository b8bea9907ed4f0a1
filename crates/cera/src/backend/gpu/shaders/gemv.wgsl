// out[t][row] (+)= w[row] · x'[t] for a few tokens (up to MAX_T): one workgroup per weight
// row reads it once for all of them. The weight may be up to three concatenated (Q, K, V):
// each row's result goes to its own weight's output (see out.wgsl). The input x' is, by
// `mode`: 0 x itself; 1 RMSNorm(x) · g with g = aux (the block's input norm, done here: each
// workgroup sums x² as it reads x, which costs nothing next to the weight row); 2 act(x) · aux
// (the GLU of gate x and up aux; `act` 0 SiLU, 1 GELU).
// The variant's defs declare `WG`, `PER_ROW`, `TEAMS`, `team_sum`, `SPAN` (the runs of four
// elements an invocation takes together: with a multiple of four and a format of super-blocks,
// sixteens through `wload16`, see `chunk16`) and `MAX_T`, the most tokens it takes (see
// `GemvKind`). Loops over tokens run MAX_T times with `t < p.t` inside, never to
// `p.t`: a constant trip count lets the compiler unroll them and keep `acc` and `ss` in
// registers (a loop to `p.t` indexes them dynamically, which puts them in local memory); the
// one-token variant (MAX_T = 1) is decode's.
struct P {
    k: u32, n: u32, rb: u32, t: u32, row0: u32, acc: u32, n0: u32, n1: u32, n2: u32,
    mode: u32, eps: u32, act: u32, bias: u32, groups: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> w: array<u32>;
// x and aux are read as whole vec4s (one 16-byte load for four elements, not four: the loads,
// not the arithmetic, are most of a decode GEMV's instructions); every buffer is padded to 16
// bytes, and rows of a width not a multiple of four take their elements one by one.
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> aux: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> o0: array<f32>;
@group(0) @binding(5) var<storage, read_write> o1: array<f32>;
@group(0) @binding(6) var<storage, read_write> o2: array<f32>;
// With `bias`: the outputs' biases, concatenated as the weights are (Qwen2's Q/K/V).
@group(0) @binding(7) var<storage, read> bias: array<f32>;

// A finished row's value and its bias.
fn biased(row: u32, s: f32) -> f32 {
    if (p.bias != 0u) {
        return s + bias[row];
    }
    return s;
}

// The four elements from b.
fn ld4(b: u32) -> vec4<f32> {
    if (b % 4u == 0u) {
        return x[b / 4u];
    }
    return vec4<f32>(x[b / 4u][b % 4u], x[(b + 1u) / 4u][(b + 1u) % 4u], x[(b + 2u) / 4u][(b + 2u) % 4u], x[(b + 3u) / 4u][(b + 3u) % 4u]);
}

fn aux4(b: u32) -> vec4<f32> {
    if (b % 4u == 0u) {
        return aux[b / 4u];
    }
    return vec4<f32>(aux[b / 4u][b % 4u], aux[(b + 1u) / 4u][(b + 1u) % 4u], aux[(b + 2u) / 4u][(b + 2u) % 4u], aux[(b + 3u) / 4u][(b + 3u) % 4u]);
}

fn act4(v: vec4<f32>) -> vec4<f32> {
    if (p.act == 0u) {
        return vec4<f32>(silu(v.x), silu(v.y), silu(v.z), silu(v.w));
    }
    return vec4<f32>(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w));
}

// This invocation's share of row `row`: elements e0, e0 + step, ... (in fours) summed into
// `acc` per token (and x² into `ss` for the norm).
var<private> acc: array<f32, MAX_T>;
var<private> ss: array<f32, MAX_T>;

// Adds the four elements at `e` of the row, those inside it. A chunk wholly past the row's end
// loads nothing: past the last row that would be past the buffer's end (which is padded to
// 16 bytes only), and our shaders are built without naga's bounds checks (`Gpu::pipeline`),
// so only a driver's robust buffer access would make such a load harmless.
fn chunk(rb: u32, e: u32) {
    if (e >= p.k) {
        return;
    }
    let m = (vec4<u32>(e) + vec4<u32>(0u, 1u, 2u, 3u)) < vec4<u32>(p.k);
    let wv = select(vec4<f32>(0.0), wload4(rb, e), m);
    var g = vec4<f32>(1.0);
    if (p.mode == 1u) {
        g = select(vec4<f32>(0.0), aux4(e), m);
    }
    for (var t = 0u; t < MAX_T; t++) {
        if (t >= p.t) {
            break;
        }
        let xb = t * p.k + e;
        var xv = select(vec4<f32>(0.0), ld4(xb), m);
        if (p.mode == 1u) {
            ss[t] += dot(xv, xv);
            xv *= g;
        } else if (p.mode == 2u) {
            xv = select(vec4<f32>(0.0), act4(xv) * aux4(xb), m);
        }
        acc[t] += dot(wv, xv);
    }
}

// Adds the 16 elements at `e` (a multiple of 16, all inside the row: only formats of
// 256-element super-blocks take this, whose rows are whole blocks) through `wload16`, which
// decodes their block's header once.
fn chunk16(rb: u32, e: u32) {
    let wm = wload16(rb, e);
    col4(wm[0], e);
    col4(wm[1], e + 4u);
    col4(wm[2], e + 8u);
    col4(wm[3], e + 12u);
}

// Adds four decoded weights `wv`, elements `e`.. of the row (all inside it).
fn col4(wv: vec4<f32>, e: u32) {
    var g = vec4<f32>(1.0);
    if (p.mode == 1u) {
        g = aux4(e);
    }
    for (var t = 0u; t < MAX_T; t++) {
        if (t >= p.t) {
            break;
        }
        let xb = t * p.k + e;
        var xv = ld4(xb);
        if (p.mode == 1u) {
            ss[t] += dot(xv, xv);
            xv *= g;
        } else if (p.mode == 2u) {
            xv = act4(xv) * aux4(xb);
        }
        acc[t] += dot(wv, xv);
    }
}

// Whether an invocation's runs are whole sixteens for `wload16`: SPAN a multiple of four and
// a format with a `wload16` of its own.
const UNIT16: bool = HAS_WLOAD16 && SPAN % 4u == 0u;

// The row width as a pipeline constant (0: none, the width is `p.k`). Built with it (one
// pipeline per width a model has, `CERA_GPU_GEMV_KC=1`), an invocation's passes over the row
// are a constant count the compiler can unroll, issuing all of its loads before waiting for the
// first; measured no faster on an H100, so off by default.
override KC: u32 = 0u;

fn width() -> u32 {
    if (KC != 0u) {
        return KC;
    }
    return p.k;
}

fn partial(row: u32, e0: u32, step: u32) {
    let rb = row * p.rb;
    for (var t = 0u; t < MAX_T; t++) {
        acc[t] = 0.0;
        ss[t] = 0.0;
    }
    // (four chunks per pass, for more loads in flight, measured slower on the H200: SmolLM2's
    // Q4_1 GEMVs 13.0 -> 14.6 us, the masked chunks' work outweighing it)
    let k = width();
    let passes = (k + step - 1u) / step;
    for (var i = 0u; i < passes; i++) {
        let e = e0 + i * step;
        if (e >= k) {
            continue;
        }
        if (UNIT16) {
            for (var c = 0u; c < SPAN / 4u; c++) {
                if (e + 16u * c < k) {
                    chunk16(rb, e + 16u * c);
                }
            }
        } else {
            for (var c = 0u; c < SPAN; c++) {
                chunk(rb, e + 4u * c);
            }
        }
    }
}

// The workgroup's sum of `v` for its row (uniform control flow): with SHUFFLES (the
// WorkgroupTeams variant) each team of 32 sums by shuffles, then the teams' sums through
// workgroup memory, two barriers; else the tree of `wg_sum`, log2(WG) + 2 of them.
fn row_sum(li: u32, v: f32) -> f32 {
    if (!SHUFFLES) {
        return wg_sum(li, v);
    }
    red[li] = team_sum(v);
    workgroupBarrier();
    var s = 0.0;
    for (var k = 0u; k < WG; k += 32u) {
        s += red[k];
    }
    workgroupBarrier();
    return s;
}

// The norm's scale from the sum of x² over the whole row.
fn norm_scale(ssum: f32) -> f32 {
    return inverseSqrt(ssum / f32(p.k) + bitcast<f32>(p.eps));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = group_index(wid, nwg);
    if (g >= p.groups) {
        return;
    }
    if (PER_ROW) {
        // an invocation per row, no barriers: for a CPU running the shader (lavapipe), where
        // each barrier costs a switch through every invocation of the workgroup
        let row = g * WG + li;
        if (row < p.n) {
            partial(row, 0u, 4u * SPAN);
            for (var t = 0u; t < MAX_T; t++) {
                if (t >= p.t) {
                    break;
                }
                var s = acc[t];
                if (p.mode == 1u) {
                    s *= norm_scale(ss[t]);
                }
                store_out(t, p.row0 + row, biased(p.row0 + row, s));
            }
        }
        return;
    }
    if (TEAMS > 0u) {
        // TEAMS rows per workgroup, a team of 32 invocations each: its sums by subgroup
        // shuffles, no barriers (a team is a subgroup, or an aligned half of one of 64, which
        // the butterfly's lanes never leave). Out-of-range teams compute row 0 and store
        // nothing: the shuffles need every lane.
        let team = li / 32u;
        let lane = li % 32u;
        let row = g * TEAMS + team;
        let live = row < p.n;
        partial(select(0u, row, live), lane * 4u * SPAN, 128u * SPAN);
        for (var t = 0u; t < MAX_T; t++) {
            if (t >= p.t) {
                break;
            }
            var s = team_sum(acc[t]);
            if (p.mode == 1u) {
                s *= norm_scale(team_sum(ss[t]));
            }
            if (live && lane == 0u) {
                store_out(t, p.row0 + row, biased(p.row0 + row, s));
            }
        }
        return;
    }
    // a workgroup per row
    let row = g;
    partial(row, li * 4u * SPAN, WG * 4u * SPAN);
    for (var t = 0u; t < MAX_T; t++) {
        if (t >= p.t) {
            break;
        }
        var s = row_sum(li, acc[t]);
        if (p.mode == 1u) {
            s *= norm_scale(row_sum(li, ss[t]));
        }
        if (li == 0u) {
            store_out(t, p.row0 + row, biased(p.row0 + row, s));
        }
    }
}
