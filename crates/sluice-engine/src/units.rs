//! How figures read in messages, the summary and reports: decimal units and grouped digits,
//! so that every place that shows a size or a count shows it alike.

/// A byte count in decimal units (`1.2 MB`, `3.45 GB`).
pub fn human_bytes(n: u64) -> String {
    let n = n as f64;
    if n >= 1e12 {
        format!("{:.2} TB", n / 1e12)
    } else if n >= 1e9 {
        format!("{:.2} GB", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1} MB", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1} kB", n / 1e3)
    } else {
        format!("{n} B")
    }
}

/// A count with thousands separators (`2,999,671`).
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let head = match digits.len() % 3 {
        0 => 3.min(digits.len()),
        r => r,
    };
    let mut out = digits[..head].to_string();
    for group in digits.as_bytes()[head..].chunks(3) {
        out.push(',');
        out.push_str(std::str::from_utf8(group).unwrap_or_default());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_decimal_and_counts_grouped() {
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(1_500), "1.5 kB");
        assert_eq!(human_bytes(74_200_000), "74.2 MB");
        assert_eq!(human_bytes(1_180_000_000_000), "1.18 TB");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(7_126_215), "7,126,215");
    }
}
