//! Points in time on the command line and in reports: store-clock
//! milliseconds shown as UTC (`2026-11-30T02:14:07Z`), and `--since` /
//! `--until` read as a UTC timestamp, milliseconds since the epoch, or a
//! duration back from now (`24h`, `90m`, `7d`).

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count (the inverse of [`days_from_civil`]).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `ms` since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC, seconds).
pub fn utc(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Reads a `--since`/`--until` value against `now_ms`.
pub fn parse(text: &str, now_ms: u64) -> Result<u64, String> {
    let t = text.trim();
    let bad = || {
        format!(
            "`{t}` is not a time: give a UTC timestamp (2026-11-30T02:00:00Z), milliseconds since the epoch, or a duration back from now (90m, 24h, 7d)"
        )
    };
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse().map_err(|_| bad());
    }
    if let Some(unit) = t.chars().last().filter(|c| "smhd".contains(*c)) {
        let n: u64 = t[..t.len() - 1].parse().map_err(|_| bad())?;
        let ms = match unit {
            's' => 1_000,
            'm' => 60_000,
            'h' => 3_600_000,
            _ => 86_400_000,
        };
        return Ok(now_ms.saturating_sub(n.saturating_mul(ms)));
    }
    // YYYY-MM-DDTHH:MM:SS[.fff]Z
    let t = t.strip_suffix('Z').ok_or_else(bad)?;
    let (date, time) = t.split_once('T').ok_or_else(bad)?;
    let num = |s: &str| s.parse::<i64>().map_err(|_| bad());
    let d: Vec<&str> = date.split('-').collect();
    let (whole, frac) = time.split_once('.').unwrap_or((time, ""));
    let h: Vec<&str> = whole.split(':').collect();
    if d.len() != 3 || h.len() != 3 {
        return Err(bad());
    }
    let (y, mo, da) = (num(d[0])?, num(d[1])?, num(d[2])?);
    let (hh, mi, ss) = (num(h[0])?, num(h[1])?, num(h[2])?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&da) || hh > 23 || mi > 59 || ss > 60 {
        return Err(bad());
    }
    let millis = match frac {
        "" => 0,
        f if f.len() <= 3 && f.bytes().all(|b| b.is_ascii_digit()) => {
            num(f)? * 10_i64.pow(3 - f.len() as u32)
        }
        _ => return Err(bad()),
    };
    let secs = days_from_civil(y, mo, da) * 86_400 + hh * 3600 + mi * 60 + ss;
    u64::try_from(secs * 1000 + millis).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_back_as_they_print() {
        for ms in [0, 1_700_000_000_000, 1_800_000_123_000, 951_782_400_000] {
            assert_eq!(parse(&utc(ms), 0), Ok(ms - ms % 1000));
        }
        assert_eq!(utc(1_700_000_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(parse("2023-11-14T22:13:20.5Z", 0), Ok(1_700_000_000_500));
    }

    #[test]
    fn durations_count_back_from_now() {
        assert_eq!(parse("90m", 10_000_000), Ok(10_000_000 - 5_400_000));
        assert_eq!(parse("1d", 1_000), Ok(0));
        assert_eq!(parse("1700000000000", 0), Ok(1_700_000_000_000));
    }

    #[test]
    fn anything_else_is_refused_with_the_forms_it_takes() {
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-11-30 02:00",
            "5w",
            "-5m",
        ] {
            let e = parse(bad, 0).unwrap_err();
            assert!(e.contains("UTC timestamp"), "{bad}: {e}");
        }
    }
}
