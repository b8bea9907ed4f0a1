//! Integer ranges as exact GBNF: the decimal strings (no leading zeros, `-` for negatives, no
//! `-0`) of exactly the integers in `[lo, hi]`, either bound optional.
//!
//! Same-length ranges are split digit by digit (`[lo, hi]` with equal first digits recurses on
//! the rest; otherwise it is `lo₀ [rest..999] | [lo₀+1 - hi₀-1] [0-9]* | hi₀ [000..rest]`), and
//! mixed-length ranges are split by length. Open ends allow at most [`MAX_DIGITS`] digits.

/// Digits allowed for an unbounded side (keeps sampled numbers finite and inside i64).
pub(crate) const MAX_DIGITS: usize = 18;

/// A GBNF expression for the integers in `[lo, hi]`.
pub(crate) fn int_range(lo: Option<i64>, hi: Option<i64>) -> String {
    let mut alts: Vec<String> = Vec::new();
    let lo = lo.map(|v| v.max(-999_999_999_999_999_999));
    let hi = hi.map(|v| v.min(999_999_999_999_999_999));
    if let (Some(a), Some(b)) = (lo, hi)
        && a > b
    {
        return "[^\\x00-\\U0010FFFF]".into(); // empty range: matches nothing
    }
    // negative part: -x for x in [max(1, -hi), -lo]
    if lo.is_none_or(|l| l < 0) {
        let xmin = hi.map_or(1, |h| (-h).max(1));
        let xmax = lo.map(|l| -l);
        if xmax.is_none_or(|m| m >= xmin) {
            alts.push(format!(
                "\"-\" {}",
                nat_range(xmin as u64, xmax.map(|m| m as u64))
            ));
        }
    }
    // non-negative part: [max(0, lo), hi]
    if hi.is_none_or(|h| h >= 0) {
        let a = lo.map_or(0, |l| l.max(0)) as u64;
        alts.push(nat_range(a, hi.map(|h| h as u64)));
    }
    if alts.len() == 1 {
        alts.pop().unwrap_or_default()
    } else {
        format!("({})", alts.join(" | "))
    }
}

fn digits(n: u64) -> usize {
    n.to_string().len()
}

/// Naturals in `[a, b]` (`b` open: up to `MAX_DIGITS` digits).
fn nat_range(a: u64, b: Option<u64>) -> String {
    let mut alts = Vec::new();
    let max_len = b.map_or(MAX_DIGITS, digits);
    for len in digits(a)..=max_len {
        let first = if len == 1 {
            0
        } else {
            10u64.pow(len as u32 - 1)
        };
        let last = 10u64.pow(len as u32) - 1;
        let lo = a.max(first);
        let hi = b.map_or(last, |b| b.min(last));
        if lo > hi {
            continue;
        }
        alts.push(same_len(&lo.to_string(), &hi.to_string()));
    }
    match alts.len() {
        0 => "[^\\x00-\\U0010FFFF]".into(),
        1 => alts.pop().unwrap_or_default(),
        _ => format!("({})", alts.join(" | ")),
    }
}

fn digit_class(a: u8, b: u8) -> String {
    if a == b {
        format!("\"{}\"", a as char)
    } else {
        format!("[{}-{}]", a as char, b as char)
    }
}

/// Strings of digits of equal length between `lo` and `hi` (inclusive, lexicographic).
fn same_len(lo: &str, hi: &str) -> String {
    let (l, h) = (lo.as_bytes(), hi.as_bytes());
    if l.is_empty() {
        return "\"\"".into();
    }
    let n = l.len();
    if l.iter().skip(1).all(|&c| c == b'0') && h.iter().skip(1).all(|&c| c == b'9') {
        let rest = if n > 1 {
            format!(" [0-9]{{{}}}", n - 1)
        } else {
            String::new()
        };
        return format!("{}{rest}", digit_class(l[0], h[0]));
    }
    if l[0] == h[0] {
        return format!("\"{}\" {}", l[0] as char, same_len(&lo[1..], &hi[1..]));
    }
    let nines = "9".repeat(n - 1);
    let zeros = "0".repeat(n - 1);
    let mut alts = vec![format!(
        "\"{}\" {}",
        l[0] as char,
        same_len(&lo[1..], &nines)
    )];
    if l[0] + 1 < h[0] {
        alts.push(format!(
            "{} [0-9]{{{}}}",
            digit_class(l[0] + 1, h[0] - 1),
            n - 1
        ));
    }
    alts.push(format!(
        "\"{}\" {}",
        h[0] as char,
        same_len(&zeros, &hi[1..])
    ));
    format!("({})", alts.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::Grammar;

    fn check(lo: Option<i64>, hi: Option<i64>) {
        let g = Grammar::parse(&format!("root ::= {}", int_range(lo, hi))).unwrap();
        for v in -1200i64..=1200 {
            let want = lo.is_none_or(|l| v >= l) && hi.is_none_or(|h| v <= h);
            assert_eq!(g.accepts(&v.to_string()), want, "{v} in {lo:?}..={hi:?}");
        }
        assert!(!g.accepts("-0") && !g.accepts("007") && !g.accepts(""));
    }

    #[test]
    fn ranges_are_exact() {
        for (lo, hi) in [
            (Some(0), Some(100)),
            (Some(-5), Some(5)),
            (Some(13), Some(987)),
            (Some(-987), Some(-13)),
            (Some(7), None),
            (None, Some(42)),
            (None, Some(-42)),
            (Some(-42), None),
            (Some(100), Some(100)),
            (Some(1), Some(1000)),
            (None, None),
        ] {
            check(lo, hi);
        }
    }
}
