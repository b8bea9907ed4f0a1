//! The host's cores, as the default thread counts need them: how many physical cores this
//! process may run on, and which of them are the fast ones on a heterogeneous CPU.
//!
//! Why not `available_parallelism` alone: it counts logical CPUs, and a second hardware thread
//! on a core shares that core's vector units and its path to memory. Decode streams every
//! weight once per token and prefill keeps the FMA units busy, so a sibling thread adds little
//! work and a barrier partner that arrives late. And on a phone's big.LITTLE cores (or Intel's
//! P- and E-cores) a step's work is split evenly-ish across threads that then wait for the
//! slowest: the little cores set the pace. So the default is one thread per physical core of
//! the fastest class, as llama.cpp's default is on the hosts where it can tell.
//!
//! Linux says all of it in sysfs (`topology/thread_siblings_list`, `cpu_capacity` on Arm,
//! `/sys/devices/cpu_core/cpus` on Intel hybrids); elsewhere, or where sysfs is missing, the
//! logical count stands in for everything.

use std::sync::OnceLock;

/// What [`CpuTopology::get`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CpuTopology {
    /// Logical CPUs this process may use (affinity and cgroup quota applied).
    pub logical: usize,
    /// Physical cores among them (hardware threads of one core counted once).
    pub physical: usize,
    /// Physical cores of the fastest class; equal to `physical` on a homogeneous CPU.
    pub performance: usize,
    /// Whether the cores come in classes of different speed (big.LITTLE, P/E cores).
    pub heterogeneous: bool,
}

impl CpuTopology {
    /// The host's topology, detected once.
    pub fn get() -> &'static CpuTopology {
        static T: OnceLock<CpuTopology> = OnceLock::new();
        T.get_or_init(CpuTopology::detect)
    }

    /// Threads a step runs on when the caller does not say: one per fast physical core, never
    /// more than the logical CPUs the process may use (a cgroup quota of 2 CPUs on a 16-core
    /// host means 2).
    pub fn default_threads(&self) -> usize {
        self.performance.clamp(1, self.logical.max(1))
    }

    fn detect() -> CpuTopology {
        let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
        #[cfg(target_os = "linux")]
        if let Some(allowed) = allowed_cpus()
            && let Some(t) = from_sysfs(std::path::Path::new("/sys/devices"), &allowed, logical)
        {
            return t;
        }
        CpuTopology::flat(logical)
    }

    /// A host we know nothing more of: every logical CPU a core of one class.
    fn flat(logical: usize) -> CpuTopology {
        CpuTopology {
            logical,
            physical: logical,
            performance: logical,
            heterogeneous: false,
        }
    }
}

/// The logical CPUs this process's affinity mask allows (`Cpus_allowed_list` of
/// `/proc/self/status`, e.g. `0-3,8-11`).
#[cfg(target_os = "linux")]
fn allowed_cpus() -> Option<Vec<usize>> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    parse_cpu_list(line.trim())
}

/// A kernel CPU list (`0-3,8,10-11`) as its CPU numbers; `None` if malformed.
#[cfg(any(target_os = "linux", test))]
fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// The topology of the `allowed` CPUs as sysfs under `devices` (normally `/sys/devices`)
/// describes it, `logical` being the usable count (a cgroup quota may make it smaller than
/// `allowed`). `None` when sysfs lacks the sibling lists (then nothing here can be trusted).
#[cfg(any(target_os = "linux", test))]
fn from_sysfs(devices: &std::path::Path, allowed: &[usize], logical: usize) -> Option<CpuTopology> {
    if allowed.is_empty() {
        return None;
    }
    let cpu_dir = devices.join("system/cpu");
    let read = |p: &std::path::Path| std::fs::read_to_string(p).ok();
    // one entry per physical core: its sibling list as the kernel prints it, and its class
    let mut cores: Vec<(String, u32)> = Vec::new();
    // Intel hybrids list their P-cores here; absent elsewhere
    let p_cores = read(&devices.join("cpu_core/cpus")).and_then(|s| parse_cpu_list(s.trim()));
    let has_e_cores = devices.join("cpu_atom/cpus").exists();
    for &cpu in allowed {
        let dir = cpu_dir.join(format!("cpu{cpu}"));
        let siblings = read(&dir.join("topology/thread_siblings_list"))?;
        let class = match &p_cores {
            // a P-core outranks an E-core whatever their capacities say
            Some(p) if has_e_cores => u32::from(p.contains(&cpu)) * 2048,
            _ => read(&dir.join("cpu_capacity"))
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(1024),
        };
        let siblings = siblings.trim().to_owned();
        if !cores.iter().any(|(s, _)| *s == siblings) {
            cores.push((siblings, class));
        }
    }
    let physical = cores.len();
    let top = cores.iter().map(|c| c.1).max().unwrap_or(0);
    let low = cores.iter().map(|c| c.1).min().unwrap_or(0);
    // The fast class: cores within a factor of two of the fastest. A phone's "prime" and "big"
    // cores (capacities ~1024 and ~800) work well together; its little ones (~250-450) do not.
    let performance = cores.iter().filter(|c| c.1 == top || 2 * c.1 > top).count();
    Some(CpuTopology {
        logical,
        physical: physical.min(logical),
        performance: performance.min(logical),
        heterogeneous: low != top,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a-b"), None);
        assert_eq!(parse_cpu_list("0-99999999"), None);
    }

    /// A fake `/sys/devices`: per CPU its sibling list and capacity, and optionally Intel's
    /// hybrid core lists.
    struct FakeSys(PathBuf);

    impl FakeSys {
        fn new(name: &str) -> FakeSys {
            let root =
                std::env::temp_dir().join(format!("cera-topology-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            FakeSys(root)
        }
        fn cpu(&self, n: usize, siblings: &str, capacity: Option<u32>) -> &Self {
            let d = self.0.join(format!("system/cpu/cpu{n}"));
            std::fs::create_dir_all(d.join("topology")).unwrap();
            std::fs::write(
                d.join("topology/thread_siblings_list"),
                format!("{siblings}\n"),
            )
            .unwrap();
            if let Some(c) = capacity {
                std::fs::write(d.join("cpu_capacity"), format!("{c}\n")).unwrap();
            }
            self
        }
        fn file(&self, rel: &str, text: &str) -> &Self {
            let p = self.0.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
            self
        }
    }

    impl Drop for FakeSys {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn smt_siblings_count_once() {
        // 4 cores × 2 threads, Linux numbering: cpu n and n + 4 share a core
        let s = FakeSys::new("smt");
        for c in 0..8 {
            s.cpu(c, &format!("{},{}", c % 4, c % 4 + 4), None);
        }
        let all: Vec<usize> = (0..8).collect();
        let t = from_sysfs(&s.0, &all, 8).unwrap();
        assert_eq!((t.logical, t.physical, t.performance), (8, 4, 4));
        assert!(!t.heterogeneous);
        assert_eq!(t.default_threads(), 4);
        // an affinity mask of both threads of core 0 and one of core 1: two cores
        let t = from_sysfs(&s.0, &[0, 4, 1], 3).unwrap();
        assert_eq!((t.physical, t.default_threads()), (2, 2));
        // a cgroup quota of one CPU caps whatever the mask says
        let t = from_sysfs(&s.0, &all, 1).unwrap();
        assert_eq!(t.default_threads(), 1);
    }

    #[test]
    fn big_little_takes_the_fast_cores() {
        // a phone: one prime core, three big, four little
        let s = FakeSys::new("biglittle");
        let caps = [1024, 870, 870, 870, 325, 325, 325, 325];
        for (c, cap) in caps.into_iter().enumerate() {
            s.cpu(c, &c.to_string(), Some(cap));
        }
        let all: Vec<usize> = (0..8).collect();
        let t = from_sysfs(&s.0, &all, 8).unwrap();
        assert_eq!((t.physical, t.performance), (8, 4));
        assert!(t.heterogeneous);
        assert_eq!(t.default_threads(), 4);
        // pinned to the little cores only: those are then the fastest there are
        let t = from_sysfs(&s.0, &[4, 5, 6, 7], 4).unwrap();
        assert_eq!((t.performance, t.heterogeneous), (4, false));
    }

    #[test]
    fn intel_hybrid_takes_the_p_cores() {
        // 2 P-cores with hyper-threading (cpus 0-3) and 4 E-cores (4-7); sysfs reports the
        // same capacity for all of them, so the P/E lists must decide
        let s = FakeSys::new("hybrid");
        for c in 0..4 {
            s.cpu(c, &format!("{},{}", c & !1, (c & !1) + 1), Some(1024));
        }
        for c in 4..8 {
            s.cpu(c, &c.to_string(), Some(1024));
        }
        s.file("cpu_core/cpus", "0-3\n")
            .file("cpu_atom/cpus", "4-7\n");
        let all: Vec<usize> = (0..8).collect();
        let t = from_sysfs(&s.0, &all, 8).unwrap();
        assert_eq!((t.logical, t.physical, t.performance), (8, 6, 2));
        assert!(t.heterogeneous);
        assert_eq!(t.default_threads(), 2);
    }

    #[test]
    fn missing_sysfs_is_none() {
        let s = FakeSys::new("missing");
        std::fs::create_dir_all(s.0.join("system/cpu/cpu0")).unwrap();
        assert_eq!(from_sysfs(&s.0, &[0], 1), None);
        assert_eq!(from_sysfs(&s.0, &[], 1), None);
    }

    #[test]
    fn this_host_is_consistent() {
        let t = CpuTopology::get();
        assert!(t.logical >= 1);
        assert!(1 <= t.performance && t.performance <= t.physical && t.physical <= t.logical);
        assert!((1..=t.logical).contains(&t.default_threads()));
    }
}
