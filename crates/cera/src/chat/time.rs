//! `strftime_now`: the clock as a UTC calendar date, formatted like C/Python `strftime`.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::Value;

/// The `strftime_now(format)` function for one render: Python's `datetime.strftime` of `now`
/// (taken as UTC).
pub(crate) fn strftime_now(now: SystemTime) -> Value {
    let secs = match now.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    let now = Arc::new(CivilTime::from_unix(secs));
    Value::from_function(move |format: String| -> String { now.strftime(&format) })
}

/// A UTC calendar date and time of day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CivilTime {
    pub year: i64,
    /// 1..=12
    pub month: u32,
    /// 1..=31
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// 0 = Monday .. 6 = Sunday
    pub weekday: u32,
    /// 1..=366
    pub yday: u32,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

impl CivilTime {
    /// The UTC date and time `secs` seconds after 1970-01-01T00:00:00.
    pub fn from_unix(secs: i64) -> CivilTime {
        let days = secs.div_euclid(86_400);
        let tod = secs.rem_euclid(86_400) as u32;
        // Count 400-year eras from 0000-03-01 so that the leap day ends each cycle year.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097); // day of era, 0..146096
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..399
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of March-based year
        let mp = (5 * doy + 2) / 153; // March = 0
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
        let yday = cum[month as usize - 1] + day + u32::from(month > 2 && is_leap(year));
        CivilTime {
            year,
            month,
            day,
            hour: tod / 3600,
            minute: tod / 60 % 60,
            second: tod % 60,
            // 1970-01-01 was a Thursday (3).
            weekday: (days + 3).rem_euclid(7) as u32,
            yday,
        }
    }

    /// C/Python `strftime` in the C locale. Supports the common conversions and glibc's `-`
    /// (no padding), `_` (space padding) and `0` flags; `%z`/`%Z` are empty (the time is
    /// naive, as `datetime.now()` is). Unknown conversions are copied through.
    pub fn strftime(&self, format: &str) -> String {
        let mut out = String::new();
        let mut chars = format.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let flag = match chars.peek() {
                Some(&f @ ('-' | '_' | '0')) => {
                    chars.next();
                    Some(f)
                }
                _ => None,
            };
            let Some(conv) = chars.next() else {
                out.push('%');
                if let Some(f) = flag {
                    out.push(f);
                }
                break;
            };
            let num = |n: i64, width: usize, default_pad: char| -> String {
                match flag.unwrap_or(default_pad) {
                    '-' => n.to_string(),
                    '_' => format!("{n:>width$}"),
                    _ => format!("{n:0width$}"),
                }
            };
            let hour12 = match self.hour % 12 {
                0 => 12,
                h => h,
            };
            let s = match conv {
                'a' => WEEKDAYS[self.weekday as usize][..3].to_owned(),
                'A' => WEEKDAYS[self.weekday as usize].to_owned(),
                'b' | 'h' => MONTHS[self.month as usize - 1][..3].to_owned(),
                'B' => MONTHS[self.month as usize - 1].to_owned(),
                'c' => self.strftime("%a %b %e %H:%M:%S %Y"),
                'C' => num(self.year.div_euclid(100), 2, '0'),
                'd' => num(self.day.into(), 2, '0'),
                'D' | 'x' => self.strftime("%m/%d/%y"),
                'e' => num(self.day.into(), 2, '_'),
                'F' => self.strftime("%Y-%m-%d"),
                'H' => num(self.hour.into(), 2, '0'),
                'I' => num(hour12.into(), 2, '0'),
                'j' => num(self.yday.into(), 3, '0'),
                'k' => num(self.hour.into(), 2, '_'),
                'l' => num(hour12.into(), 2, '_'),
                'm' => num(self.month.into(), 2, '0'),
                'M' => num(self.minute.into(), 2, '0'),
                'n' => "\n".to_owned(),
                'p' => if self.hour < 12 { "AM" } else { "PM" }.to_owned(),
                'P' => if self.hour < 12 { "am" } else { "pm" }.to_owned(),
                'r' => self.strftime("%I:%M:%S %p"),
                'R' => self.strftime("%H:%M"),
                'S' => num(self.second.into(), 2, '0'),
                't' => "\t".to_owned(),
                'T' | 'X' => self.strftime("%H:%M:%S"),
                // week of the year, weeks starting on Sunday (%U) or Monday (%W)
                'U' => num(
                    ((self.yday + 6 - (self.weekday + 1) % 7) / 7).into(),
                    2,
                    '0',
                ),
                'W' => num(((self.yday + 6 - self.weekday) / 7).into(), 2, '0'),
                'u' => (self.weekday + 1).to_string(),
                'w' => ((self.weekday + 1) % 7).to_string(),
                'y' => num(self.year.rem_euclid(100), 2, '0'),
                'Y' => self.year.to_string(),
                'z' | 'Z' => String::new(),
                '%' => "%".to_owned(),
                other => {
                    let mut s = String::from('%');
                    if let Some(f) = flag {
                        s.push(f);
                    }
                    s.push(other);
                    s
                }
            };
            out.push_str(&s);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_time() {
        // 2025-03-14T09:26:53Z, a Friday, day 73.
        let t = CivilTime::from_unix(1_741_944_413);
        assert_eq!(
            (
                t.year, t.month, t.day, t.hour, t.minute, t.second, t.weekday, t.yday
            ),
            (2025, 3, 14, 9, 26, 53, 4, 73)
        );
        assert_eq!(t.strftime("%d %b %Y"), "14 Mar 2025");
        assert_eq!(t.strftime("%B %d, %Y"), "March 14, 2025");
        assert_eq!(t.strftime("%Y-%m-%d %H:%M:%S"), "2025-03-14 09:26:53");
        assert_eq!(
            t.strftime("%A %-d %e %j %I%p %%"),
            "Friday 14 14 073 09AM %"
        );
        assert_eq!(t.strftime("%c"), "Fri Mar 14 09:26:53 2025");
        let leap = CivilTime::from_unix(951_782_400); // 2000-02-29
        assert_eq!(
            (leap.year, leap.month, leap.day, leap.yday),
            (2000, 2, 29, 60)
        );
        let end = CivilTime::from_unix(1_704_067_199); // 2023-12-31T23:59:59
        assert_eq!(
            (end.year, end.month, end.day, end.yday, end.weekday),
            (2023, 12, 31, 365, 6)
        );
        let before = CivilTime::from_unix(-1); // 1969-12-31T23:59:59, a Wednesday
        assert_eq!(
            (before.year, before.month, before.day, before.weekday),
            (1969, 12, 31, 2)
        );
    }
}
