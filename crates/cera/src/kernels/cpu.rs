//! CPU feature detection: which kernel tier the host can run, and the `CERA_CPU_TIER` override.

use std::fmt;

/// A set of kernels, by the instructions they need. Tiers are ordered within an architecture: a
/// host that runs one runs every lower one of its architecture, and `Scalar`. A host only ever
/// supports `Scalar` and the tiers of its own architecture.
///
/// | tier | needs |
/// | --- | --- |
/// | `Scalar` | nothing: portable Rust, every target |
/// | `Avx2` | x86-64 with AVX2, FMA and F16C (Haswell, Zen 1 and later) |
/// | `Avx512` | `Avx2` plus AVX-512 F, BW, VL, DQ and VNNI (Ice Lake, Cascade Lake, Sapphire Rapids, Zen 4 and later); the BF16 dot product also uses AVX512-BF16 (`vdpbf16ps`) where the host has it and widens to f32 otherwise |
/// | `Neon` | aarch64 (ASIMD is part of the base architecture): every 64-bit Arm CPU |
/// | `NeonDotprod` | `Neon` plus the dot product extension (`sdot`; Cortex-A55/A76, Neoverse N1, Apple M1 and later) |
/// | `NeonI8mm` | `NeonDotprod` plus the int8 matrix multiply extension (`smmla`, for the GEMM kernels; Neoverse V1/N2, Cortex-A510/A710, Apple M2 and later) |
/// | `Simd128` | wasm32 built with `-C target-feature=+simd128` (`scripts/build-wasm.sh` does): every current browser, Node and wasmtime |
///
/// The aarch64 tiers are tested under `qemu-aarch64` (`scripts/test.sh`), with `-cpu max` and
/// with a Cortex-A72, which lacks `sdot`; `Simd128` as a `wasm32-wasip1` build under Node.
///
/// WebAssembly has no run-time feature detection: an engine refuses to compile a module that
/// uses an instruction it lacks, so a module either is built with `simd128` (and every engine
/// that loads it runs the tier) or is not (and the tier does not exist in it). A loader that
/// wants to serve engines without SIMD ships two modules and picks one before loading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CpuTier {
    Scalar,
    Avx2,
    Avx512,
    Neon,
    NeonDotprod,
    NeonI8mm,
    Simd128,
}

/// The environment variable that can force a lower tier (`scalar`, `avx2`, `avx512`, `neon`,
/// `neon-dotprod`, `neon-i8mm`, `simd128`).
pub const TIER_ENV: &str = "CERA_CPU_TIER";

impl CpuTier {
    /// Every tier, lowest first within each architecture.
    pub const ALL: [CpuTier; 7] = [
        CpuTier::Scalar,
        CpuTier::Avx2,
        CpuTier::Avx512,
        CpuTier::Neon,
        CpuTier::NeonDotprod,
        CpuTier::NeonI8mm,
        CpuTier::Simd128,
    ];

    /// The name `CERA_CPU_TIER` takes.
    pub const fn name(self) -> &'static str {
        match self {
            CpuTier::Scalar => "scalar",
            CpuTier::Avx2 => "avx2",
            CpuTier::Avx512 => "avx512",
            CpuTier::Neon => "neon",
            CpuTier::NeonDotprod => "neon-dotprod",
            CpuTier::NeonI8mm => "neon-i8mm",
            CpuTier::Simd128 => "simd128",
        }
    }

    /// Whether a host that runs `self` runs `other`: `other` is `Scalar`, or a tier of the same
    /// architecture that is not higher.
    pub fn includes(self, other: CpuTier) -> bool {
        let arch = |t: CpuTier| match t {
            CpuTier::Scalar => 0,
            CpuTier::Avx2 | CpuTier::Avx512 => 1,
            CpuTier::Neon | CpuTier::NeonDotprod | CpuTier::NeonI8mm => 2,
            CpuTier::Simd128 => 3,
        };
        other == CpuTier::Scalar || (arch(other) == arch(self) && other <= self)
    }

    /// Parses a tier name, case-insensitively.
    pub fn from_name(name: &str) -> Option<CpuTier> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Whether this host can run the tier's kernels.
    pub fn is_supported(self) -> bool {
        match self {
            CpuTier::Scalar => true,
            CpuTier::Avx2 => has_avx2(),
            CpuTier::Avx512 => has_avx2() && has_avx512(),
            CpuTier::Neon => cfg!(target_arch = "aarch64"),
            CpuTier::NeonDotprod => has_dotprod(),
            CpuTier::NeonI8mm => has_dotprod() && has_i8mm(),
            CpuTier::Simd128 => cfg!(all(target_arch = "wasm32", target_feature = "simd128")),
        }
    }

    /// The highest tier this host supports.
    pub fn detect() -> CpuTier {
        Self::ALL
            .into_iter()
            .rev()
            .find(|t| t.is_supported())
            .unwrap_or(CpuTier::Scalar)
    }

    /// Every tier this host supports, lowest first.
    pub fn supported() -> Vec<CpuTier> {
        Self::ALL.into_iter().filter(|t| t.is_supported()).collect()
    }
}

impl fmt::Display for CpuTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512dq")
        && is_x86_feature_detected!("avx512vnni")
}

/// Whether the host has AVX512-BF16 (`vdpbf16ps`), used by the `Avx512` tier's BF16 kernel.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512_bf16() -> bool {
    is_x86_feature_detected!("avx512bf16")
}

#[cfg(target_arch = "aarch64")]
fn has_dotprod() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

#[cfg(target_arch = "aarch64")]
fn has_i8mm() -> bool {
    std::arch::is_aarch64_feature_detected!("i8mm")
}

#[cfg(not(target_arch = "aarch64"))]
fn has_dotprod() -> bool {
    false
}

#[cfg(not(target_arch = "aarch64"))]
fn has_i8mm() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx2() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx512() -> bool {
    false
}

/// Picks the tier from the value of `CERA_CPU_TIER` (if set) and the detected one. A request
/// for a tier the detected one includes ([`CpuTier::includes`]: lower or the same, and of the
/// same architecture) wins; an unknown name or a tier the host lacks falls back to
/// `detected`, with a message for stderr.
pub fn select_tier(requested: Option<&str>, detected: CpuTier) -> (CpuTier, Option<String>) {
    let Some(req) = requested.map(str::trim).filter(|r| !r.is_empty()) else {
        return (detected, None);
    };
    match CpuTier::from_name(req) {
        Some(t) if detected.includes(t) => (t, None),
        Some(t) => (
            detected,
            Some(format!(
                "warning: {TIER_ENV}={req}: this CPU does not support the {t} tier; using {detected}"
            )),
        ),
        None => (
            detected,
            Some(format!(
                "warning: {TIER_ENV}={req}: unknown tier (expected scalar, avx2, avx512, neon, neon-dotprod, neon-i8mm or simd128); using {detected}"
            )),
        ),
    }
}

/// The tier for this process: the detected one, lowered by `CERA_CPU_TIER` if set. Messages
/// about an unusable setting go to stderr.
pub fn tier_from_env() -> CpuTier {
    let requested = std::env::var(TIER_ENV).ok();
    let (tier, msg) = select_tier(requested.as_deref(), CpuTier::detect());
    if let Some(msg) = msg {
        eprintln!("{msg}");
    }
    tier
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in CpuTier::ALL {
            assert_eq!(CpuTier::from_name(t.name()), Some(t));
        }
        assert_eq!(CpuTier::from_name("AVX512"), Some(CpuTier::Avx512));
        assert_eq!(CpuTier::from_name("sse"), None);
    }

    #[test]
    fn selection() {
        use CpuTier::*;
        assert_eq!(select_tier(None, Avx2), (Avx2, None));
        assert_eq!(select_tier(Some(""), Avx2), (Avx2, None));
        assert_eq!(select_tier(Some("scalar"), Avx512), (Scalar, None));
        assert_eq!(select_tier(Some("AVX2"), Avx512), (Avx2, None));
        assert_eq!(select_tier(Some("avx512"), Avx512), (Avx512, None));
        let (t, msg) = select_tier(Some("avx512"), Avx2);
        assert_eq!(t, Avx2);
        assert!(msg.unwrap().contains("does not support"));
        let (t, msg) = select_tier(Some("sve"), Scalar);
        assert_eq!(t, Scalar);
        assert!(msg.unwrap().contains("unknown tier"));
        assert_eq!(select_tier(Some("neon"), NeonDotprod), (Neon, None));
        assert_eq!(
            select_tier(Some("neon-dotprod"), NeonI8mm),
            (NeonDotprod, None)
        );
        let (t, msg) = select_tier(Some("neon-i8mm"), NeonDotprod);
        assert_eq!(t, NeonDotprod);
        assert!(msg.unwrap().contains("does not support"));
        assert_eq!(select_tier(Some("scalar"), Neon), (Scalar, None));
        // another architecture's tier is never picked, however it orders
        let (t, msg) = select_tier(Some("avx2"), NeonDotprod);
        assert_eq!(t, NeonDotprod);
        assert!(msg.unwrap().contains("does not support"));
        let (t, _) = select_tier(Some("neon"), Avx512);
        assert_eq!(t, Avx512);
        assert_eq!(select_tier(Some("scalar"), Simd128), (Scalar, None));
        assert_eq!(select_tier(Some("SIMD128"), Simd128), (Simd128, None));
        let (t, msg) = select_tier(Some("simd128"), Avx2);
        assert_eq!(t, Avx2);
        assert!(msg.unwrap().contains("does not support"));
        let (t, _) = select_tier(Some("neon"), Simd128);
        assert_eq!(t, Simd128);
    }

    #[test]
    fn detection_is_consistent() {
        let d = CpuTier::detect();
        assert!(d.is_supported());
        assert!(CpuTier::Scalar.is_supported());
        for t in CpuTier::ALL {
            assert_eq!(t.is_supported(), d.includes(t), "{t}");
        }
    }

    /// `CERA_EXPECT_TIERS` (comma-separated names), when set, must be exactly the tiers this
    /// host supports: CI sets it per emulated CPU so that a detection bug fails the run instead
    /// of quietly testing fewer tiers. Unset, the supported tiers must still start at `Scalar`
    /// and end at the detected one.
    #[test]
    fn expected_tiers() {
        let supported = CpuTier::supported();
        assert_eq!(supported.first(), Some(&CpuTier::Scalar));
        assert_eq!(supported.last(), Some(&CpuTier::detect()));
        if let Ok(want) = std::env::var("CERA_EXPECT_TIERS") {
            let want: Vec<CpuTier> = want
                .split(',')
                .map(|n| CpuTier::from_name(n).unwrap_or_else(|| panic!("unknown tier {n:?}")))
                .collect();
            assert_eq!(supported, want, "CERA_EXPECT_TIERS");
        }
    }
}
