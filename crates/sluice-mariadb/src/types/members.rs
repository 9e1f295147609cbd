//! `ENUM` and `SET` values checked against the column's list of members.
//!
//! The server compares a value with the members under the column's collation, where `A` may
//! equal `a` and, in most collations, `é` equal `e`; a numeric value is a member's index (or a
//! set's bit mask). sluice decides only what it can prove under the collations whose ASCII
//! rules it knows (`*_general_ci`, `*_unicode_ci`, `*_unicode_520_ci`, `*_uca1400_*`,
//! `*_0900_ai_ci`, `*_swedish_ci`, and any `*_bin`): a value of printable ASCII that is no
//! member, where every member is printable ASCII too, is refused; any other value that is not
//! a member byte for byte goes to the server, whose warning trap decides it.

/// How values compare with members, where sluice knows: ASCII letters with or without case,
/// trailing spaces ignored (the collations' `PAD SPACE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fold {
    /// `*_bin`: byte for byte, trailing spaces ignored.
    Exact,
    /// A case-insensitive collation of the families above.
    AsciiCase,
}

impl Fold {
    /// The fold of collation `name`, or `None` where sluice leaves the comparison to the
    /// server (`_nopad_`, language collations with their own contractions, `_cs`).
    pub fn of(collation: &str) -> Option<Fold> {
        let c = collation.to_ascii_lowercase();
        if c.contains("nopad") {
            return None;
        }
        if c.ends_with("_bin") {
            return Some(Fold::Exact);
        }
        let known = [
            "_general_ci",
            "_unicode_ci",
            "_unicode_520_ci",
            "_0900_ai_ci",
            "_swedish_ci",
            "_uca1400_ai_ci",
            "_uca1400_as_ci",
        ];
        let (_, rest) = c.split_once('_')?;
        known
            .iter()
            .any(|k| format!("_{rest}") == *k)
            .then_some(Fold::AsciiCase)
    }

    fn same(self, value: &[u8], member: &[u8]) -> bool {
        let (v, m) = (trim_end_spaces(value), trim_end_spaces(member));
        match self {
            Fold::Exact => v == m,
            Fold::AsciiCase => v.eq_ignore_ascii_case(m),
        }
    }
}

fn trim_end_spaces(v: &[u8]) -> &[u8] {
    let end = v.iter().rposition(|&b| b != b' ').map_or(0, |p| p + 1);
    &v[..end]
}

/// A column's members, as `COLUMN_TYPE` lists them (`enum('a','it''s')`); `None` when the list
/// is not one sluice reads (a backslash in a member, say).
pub fn parse_members(column_type: &str) -> Option<Vec<String>> {
    let open = column_type.find('(')?;
    let close = column_type.rfind(')')?;
    let list = column_type.get(open + 1..close)?;
    let mut members = Vec::new();
    let mut chars = list.chars().peekable();
    loop {
        if chars.next()? != '\'' {
            return None;
        }
        let mut m = String::new();
        loop {
            match chars.next()? {
                '\'' if chars.peek() == Some(&'\'') => {
                    chars.next();
                    m.push('\'');
                }
                '\'' => break,
                '\\' => return None,
                c => m.push(c),
            }
        }
        members.push(m);
        match chars.next() {
            None => return Some(members),
            Some(',') => continue,
            Some(_) => return None,
        }
    }
}

/// What sluice makes of a value: a member (sent as written), not one (refused), or the
/// server's to decide.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Member,
    NotAMember,
    Server,
}

/// Whether `v` is one of `members` (an `ENUM`'s value).
pub fn enum_value(v: &[u8], members: &[String], fold: Fold) -> Verdict {
    if members.iter().any(|m| m.as_bytes() == v) {
        return Verdict::Member;
    }
    judge_part(v, members, fold)
}

/// Whether every comma-separated part of `v` is one of `members` (a `SET`'s value; the empty
/// value is the empty set).
pub fn set_value(v: &[u8], members: &[String], fold: Fold) -> Verdict {
    if v.is_empty() {
        return Verdict::Member;
    }
    if numeric(v) {
        return Verdict::Server;
    }
    let mut verdict = Verdict::Member;
    for part in v.split(|&b| b == b',') {
        if members.iter().any(|m| m.as_bytes() == part) {
            continue;
        }
        // A space before a comma is kept (`x ,y` is refused), one at the end is not: the
        // server's, by bytes.
        if part.last() == Some(&b' ') {
            verdict = Verdict::Server;
            continue;
        }
        match judge_part(part, members, fold) {
            Verdict::Member => {}
            Verdict::NotAMember => return Verdict::NotAMember,
            Verdict::Server => verdict = Verdict::Server,
        }
    }
    verdict
}

/// A value that is no member byte for byte: a member under the fold, none (only where sluice
/// can prove it), or the server's.
fn judge_part(v: &[u8], members: &[String], fold: Fold) -> Verdict {
    let printable = |b: &[u8]| b.iter().all(|&c| (b' '..=b'~').contains(&c));
    if numeric(v) || !printable(v) || !members.iter().all(|m| printable(m.as_bytes())) {
        return Verdict::Server;
    }
    match members.iter().any(|m| fold.same(v, m.as_bytes())) {
        true => Verdict::Member,
        false => Verdict::NotAMember,
    }
}

/// A value the server may read as a number (an index, a bit mask).
fn numeric(v: &[u8]) -> bool {
    v.iter().any(u8::is_ascii_digit) && v.iter().all(|b| b" +-.eE0123456789".contains(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn members_are_read_as_the_catalog_quotes_them() {
        assert_eq!(
            parse_members("enum('a','it''s','')"),
            Some(m(&["a", "it's", ""]))
        );
        assert_eq!(parse_members("set('x,y')"), Some(m(&["x,y"])));
        assert_eq!(parse_members("enum('a\\\\b')"), None);
        assert_eq!(parse_members("enum('a'"), None);
    }

    #[test]
    fn collations_sluice_knows() {
        assert_eq!(Fold::of("utf8mb4_general_ci"), Some(Fold::AsciiCase));
        assert_eq!(Fold::of("utf8mb4_uca1400_ai_ci"), Some(Fold::AsciiCase));
        assert_eq!(Fold::of("latin1_swedish_ci"), Some(Fold::AsciiCase));
        assert_eq!(Fold::of("utf8mb4_bin"), Some(Fold::Exact));
        assert_eq!(Fold::of("utf8mb4_turkish_ci"), None);
        assert_eq!(Fold::of("utf8mb4_nopad_bin"), None);
        assert_eq!(Fold::of("utf8mb4_czech_ci"), None);
    }

    #[test]
    fn enum_values() {
        let ab = m(&["a", "b c"]);
        let f = Fold::AsciiCase;
        assert_eq!(enum_value(b"a", &ab, f), Verdict::Member);
        assert_eq!(enum_value(b"B C  ", &ab, f), Verdict::Member);
        assert_eq!(enum_value(b"c", &ab, f), Verdict::NotAMember);
        assert_eq!(enum_value(b" a", &ab, f), Verdict::NotAMember);
        assert_eq!(enum_value(b"", &ab, f), Verdict::NotAMember);
        assert_eq!(enum_value(b"A", &ab, Fold::Exact), Verdict::NotAMember);
        // An index, a character the collation may equate, a member it may equate: the server's.
        assert_eq!(enum_value(b"2", &ab, f), Verdict::Server);
        assert_eq!(enum_value("é".as_bytes(), &ab, f), Verdict::Server);
        assert_eq!(enum_value(b"e", &m(&["é"]), f), Verdict::Server);
        assert_eq!(enum_value(b"a\x01", &ab, f), Verdict::Server);
    }

    #[test]
    fn set_values() {
        let xyz = m(&["x", "y", "z"]);
        let f = Fold::AsciiCase;
        assert_eq!(set_value(b"", &xyz, f), Verdict::Member);
        assert_eq!(set_value(b"x,Z,x", &xyz, f), Verdict::Member);
        assert_eq!(set_value(b"x,w", &xyz, f), Verdict::NotAMember);
        assert_eq!(set_value(b"x,", &xyz, f), Verdict::NotAMember);
        assert_eq!(set_value(b",x", &xyz, f), Verdict::NotAMember);
        assert_eq!(set_value(b"x ,y", &xyz, f), Verdict::Server);
        assert_eq!(set_value(b"5", &xyz, f), Verdict::Server);
        assert_eq!(set_value("x,é".as_bytes(), &xyz, f), Verdict::Server);
    }
}
