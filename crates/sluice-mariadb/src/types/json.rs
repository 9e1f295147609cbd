//! MariaDB's `JSON` columns, checked on the client as the server's `json_valid` checks them.
//!
//! In MariaDB `JSON` is `LONGTEXT` with a `CHECK (json_valid(col))`, so a value is refused by
//! that constraint, not by a type. `json_valid` is MariaDB's own scanner (`strings/json_lib.c`),
//! which is not RFC 8259: it takes `1.`, `"\x"`, `[-]` and `[1e]`, and refuses nesting deeper
//! than 31 levels and an unpaired surrogate (`"\ud800"`). A general JSON parser would refuse
//! values the server stores, so this module follows that scanner's states and character
//! classes, and its tests compare it with the server's `json_valid` on many strings
//! (`tests/mariadb.rs`).
//!
//! Where the scanner's outcome depends on memory past its tables (a key that starts with a
//! character beyond ASCII followed by a quote, `u` or a backslash: MariaDB looks that
//! character up in a 128-entry table), the value is the server's to decide: sluice sends it as
//! written and the warning trap watches it.

use super::convert::{invalid, Invalid};
use super::scalar::Checked;

/// MariaDB's `JSON_DEPTH_LIMIT`: a value may open at most this many containers less one.
const DEPTH_LIMIT: usize = 32;

/// `value`, valid UTF-8, as `json_valid` takes it: valid, refused (with where and why), or
/// the server's.
pub fn check(value: &[u8]) -> Result<Checked, Invalid> {
    let mut scan = Scan {
        s: value,
        at: 0,
        stack: vec![State::Done],
        state: State::Value,
    };
    match scan.run() {
        Ok(()) => Ok(Checked::Valid),
        Err(Stop::Server) => Ok(Checked::Server),
        Err(Stop::Refused(why)) => Err(invalid(format!(
            "not valid JSON (the column's json_valid check): {why}"
        ))),
    }
}

/// Why a scan stopped before the end.
enum Stop {
    Refused(String),
    Server,
}

/// The scanner's states, as `json_lib.c` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Value,
    Key,
    ObjStart,
    ObjEnd,
    ArrayStart,
    ArrayEnd,
    Done,
    ObjCont,
    ArrayCont,
}

/// A character's class outside strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Eos,
    LCurly,
    RCurly,
    LSquare,
    RSquare,
    Colon,
    Comma,
    Quote,
    /// `-` and `0`-`9`.
    Digit,
    /// `f`, `n` or `t`: the first letter of a literal.
    Literal(&'static [u8]),
    Etc,
    /// A control character other than tab, newline and carriage return.
    Control,
}

fn class(b: u8) -> Class {
    match b {
        b'{' => Class::LCurly,
        b'}' => Class::RCurly,
        b'[' => Class::LSquare,
        b']' => Class::RSquare,
        b':' => Class::Colon,
        b',' => Class::Comma,
        b'"' => Class::Quote,
        b'-' | b'0'..=b'9' => Class::Digit,
        b'f' => Class::Literal(b"alse"),
        b'n' => Class::Literal(b"ull"),
        b't' => Class::Literal(b"rue"),
        0..=0x1f => Class::Control,
        _ => Class::Etc,
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The number scanner's states (`json_num_states`); `OK` ends the number.
const OK: i8 = 0;
const GO1: i8 = 2;
const Z: i8 = 3;
const Z1: i8 = 4;
const INT: i8 = 5;
const FRAC: i8 = 6;
const EX: i8 = 7;
const EX1: i8 = 8;
/// Not a number's next character (`JE_SYN`, `JE_BAD_CHR`): the number ends before it.
const NO: i8 = -1;

/// Columns: `-`, `+`, `0`, `1`-`9`, `.`, `e`/`E`, an ending character (space, tab, newline,
/// carriage return, `,`, `]`, `}`), any other ASCII character. A number may start `0e` or
/// `-0E` (MariaDB 10.11 takes `0e5`).
const NUMBER: [[i8; 8]; 9] = [
    [NO, NO, NO, NO, NO, NO, NO, NO],
    [GO1, NO, Z, INT, NO, NO, NO, NO],
    [NO, NO, Z1, INT, NO, NO, NO, NO],
    [NO, NO, NO, NO, FRAC, EX, OK, NO],
    [NO, NO, NO, NO, FRAC, EX, OK, NO],
    [NO, NO, INT, INT, FRAC, EX, OK, NO],
    [NO, NO, FRAC, FRAC, NO, EX, OK, NO],
    [EX, EX, EX1, EX1, NO, NO, NO, NO],
    [NO, NO, EX1, EX1, NO, NO, OK, NO],
];

/// A byte's column in [`NUMBER`]. A control character ends the number (the server's table
/// gives it `NS_OK`), and the scanner then refuses it.
fn number_class(b: u8) -> usize {
    match b {
        b'-' => 0,
        b'+' => 1,
        b'0' => 2,
        b'1'..=b'9' => 3,
        b'.' => 4,
        b'e' | b'E' => 5,
        b' ' | b'\t' | b'\n' | b'\r' | b',' | b']' | b'}' => 6,
        _ => 7,
    }
}

struct Scan<'a> {
    s: &'a [u8],
    at: usize,
    stack: Vec<State>,
    state: State,
}

type Step = Result<bool, Stop>;

impl Scan<'_> {
    fn run(&mut self) -> Result<(), Stop> {
        loop {
            let c = self.next_nonspace();
            if self.act(self.state, c)? {
                return Ok(());
            }
        }
    }

    fn refused<T>(&self, why: impl std::fmt::Display) -> Result<T, Stop> {
        Err(Stop::Refused(format!("{why} at byte {}", self.at)))
    }

    fn unexpected<T>(&self, c: Class) -> Result<T, Stop> {
        match c {
            Class::Eos => Err(Stop::Refused("it ends too early".into())),
            Class::Control => self.refused("a control character"),
            _ => self.refused(format!("'{}' is not expected", self.shown())),
        }
    }

    /// The character just read, as a message shows it.
    fn shown(&self) -> String {
        let start = self.at.saturating_sub(1);
        let end = (start + 1..=self.s.len())
            .find(|&e| std::str::from_utf8(&self.s[start..e]).is_ok())
            .unwrap_or(self.at);
        String::from_utf8_lossy(&self.s[start..end]).into_owned()
    }

    /// The next character past spaces, consumed.
    fn next_nonspace(&mut self) -> Class {
        while let Some(&b) = self.s.get(self.at) {
            self.at += 1;
            if !is_space(b) {
                return class(b);
            }
        }
        Class::Eos
    }

    fn next_byte(&mut self) -> Option<u8> {
        let b = *self.s.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    /// One action of `json_actions`; `true` when the value is complete.
    fn act(&mut self, state: State, c: Class) -> Step {
        match (state, c) {
            (_, Class::Control) => self.unexpected(c),
            (State::Done, Class::Eos) => Ok(true),
            (State::ObjEnd | State::ArrayEnd, Class::Eos | Class::RCurly)
            | (State::ObjEnd | State::ArrayEnd, Class::RSquare | Class::Comma) => {
                let top = *self.stack.last().expect("the stack holds Done");
                self.act(top, c)
            }
            (State::Value, Class::LCurly) => self.open(State::ObjStart, State::ObjCont),
            (State::Value, Class::LSquare) => self.open(State::ArrayStart, State::ArrayCont),
            (State::Value, Class::Quote) => self.string().map(|()| self.pop_to_top()),
            (State::Value, Class::Digit) => self.number().map(|()| self.pop_to_top()),
            (State::Value, Class::Literal(rest)) => self.literal(rest).map(|()| self.pop_to_top()),
            (State::Key, Class::Quote) => self.colon(),
            (State::Key, Class::Eos) => self.unexpected(c),
            (State::Key, _) => self.key(),
            (State::ObjStart | State::ObjCont, Class::RCurly) => self.close(State::ObjEnd),
            (State::ObjStart, Class::Quote) => self.to(State::Key),
            (State::ArrayStart, Class::RSquare) | (State::ArrayCont, Class::RSquare) => {
                self.close(State::ArrayEnd)
            }
            (
                State::ArrayStart,
                Class::LCurly | Class::LSquare | Class::Quote | Class::Digit | Class::Literal(_),
            ) => {
                // The item's first character is read again as a value.
                self.at -= 1;
                self.to(State::Value)
            }
            (State::ObjCont, Class::Comma) => match self.next_nonspace() {
                Class::Quote => self.to(State::Key),
                other => self.unexpected(other),
            },
            (State::ArrayCont, Class::Comma) => self.to(State::Value),
            _ => self.unexpected(c),
        }
    }

    fn to(&mut self, state: State) -> Step {
        self.state = state;
        Ok(false)
    }

    /// After a scalar, the scan goes on in its container's state.
    fn pop_to_top(&mut self) -> bool {
        self.state = *self.stack.last().expect("the stack holds Done");
        false
    }

    fn open(&mut self, state: State, cont: State) -> Step {
        if self.stack.len() >= DEPTH_LIMIT {
            return self.refused(format!("nested deeper than {} levels", DEPTH_LIMIT - 1));
        }
        self.stack.push(cont);
        self.to(state)
    }

    fn close(&mut self, end: State) -> Step {
        self.stack.pop();
        self.to(end)
    }

    /// `alse`, `ull` or `rue` after a literal's first letter.
    fn literal(&mut self, rest: &[u8]) -> Result<(), Stop> {
        for &want in rest {
            match self.next_byte() {
                Some(b) if b == want => {}
                Some(_) => return self.refused("a misspelt true, false or null"),
                None => return Err(Stop::Refused("it ends too early".into())),
            }
        }
        Ok(())
    }

    /// A number whose first character (`-` or a digit) was read; its end is not consumed.
    fn number(&mut self) -> Result<(), Stop> {
        let first = self.s[self.at - 1];
        let mut state = NUMBER[1][number_class(first)];
        loop {
            let Some(&b) = self.s.get(self.at) else {
                return match NUMBER[state as usize][6] {
                    OK => Ok(()),
                    _ => Err(Stop::Refused("a number ends too early".into())),
                };
            };
            if b >= 0x80 {
                self.at += 1;
                return self.refused("a number holds a character beyond ASCII");
            }
            let next = NUMBER[state as usize][number_class(b)];
            if next <= OK {
                return Ok(());
            }
            state = next;
            self.at += 1;
        }
    }

    /// A string's characters after its opening quote, through its closing quote.
    fn string(&mut self) -> Result<(), Stop> {
        loop {
            match self.next_byte() {
                None => return Err(Stop::Refused("a string is not closed".into())),
                Some(b'"') => return Ok(()),
                Some(b'\\') => self.escape()?,
                Some(0..=0x1f) => return self.refused("a control character in a string"),
                Some(_) => {}
            }
        }
    }

    /// An escape after its backslash: `\uXXXX` (a surrogate pair in two), a control character
    /// refused, any other character taken.
    fn escape(&mut self) -> Result<(), Stop> {
        match self.next_byte() {
            None => Err(Stop::Refused("it ends in an escape".into())),
            Some(0..=0x1f) => self.refused("an escaped control character"),
            Some(b'u') => self.unicode_escape(),
            Some(_) => Ok(()),
        }
    }

    fn unicode_escape(&mut self) -> Result<(), Stop> {
        let first = self.hex4()?;
        match first {
            0xD800..=0xDBFF => {
                if self.next_byte() != Some(b'\\') || self.next_byte() != Some(b'u') {
                    return self.refused(format!("\\u{first:04X} is a surrogate with no pair"));
                }
                match self.hex4()? {
                    0xDC00..=0xDFFF => Ok(()),
                    second => self.refused(format!("\\u{first:04X}\\u{second:04X} is not a pair")),
                }
            }
            0xDC00..=0xDFFF => self.refused(format!("\\u{first:04X} is a surrogate with no pair")),
            _ => Ok(()),
        }
    }

    fn hex4(&mut self) -> Result<u32, Stop> {
        let mut n = 0;
        for _ in 0..4 {
            let digit = match self.next_byte() {
                None => return Err(Stop::Refused("it ends in an escape".into())),
                Some(b) => (b as char).to_digit(16),
            };
            match digit {
                Some(d) => n = n * 16 + d,
                None => return self.refused("\\u needs four hexadecimal digits"),
            }
        }
        Ok(n)
    }

    /// In the key state on a non-quote character: the key's first character was read (spaces
    /// before it skipped, as the server skips them); the rest of the key, then its colon.
    fn key(&mut self) -> Step {
        let first = self.s[self.at - 1];
        if first >= 0x80
            && self
                .after_wide_char(self.at - 1)
                .is_some_and(|b| b"\"u\\".contains(&b))
        {
            // The server looks this character up past the end of a 128-entry table, to see
            // whether it begins an escape: only a quote, `u` or a backslash after it would
            // read differently if it did.
            return Err(Stop::Server);
        }
        if first == b'\\' {
            self.escape()?;
        }
        loop {
            match self.next_byte() {
                None => return Err(Stop::Refused("a key is not closed".into())),
                Some(b'"') => return self.colon_after_key(),
                Some(b'\\') => self.escape()?,
                Some(0..=0x1f) => return self.refused("a control character in a key"),
                Some(_) => {}
            }
        }
    }

    /// The byte after the UTF-8 character that starts at `at`.
    fn after_wide_char(&self, at: usize) -> Option<u8> {
        let len = match self.s[at] {
            0xf0.. => 4,
            0xe0.. => 3,
            _ => 2,
        };
        self.s.get(at + len).copied()
    }

    /// After a key's closing quote: spaces, then `:`, then a value.
    fn colon_after_key(&mut self) -> Step {
        loop {
            match self.next_byte() {
                None => return Err(Stop::Refused("it ends too early".into())),
                Some(b':') => return self.to(State::Value),
                Some(b) if is_space(b) => {}
                Some(_) => return self.refused("a key needs a ':' after it"),
            }
        }
    }

    /// An empty key's closing quote was read (or only spaces stood before it).
    fn colon(&mut self) -> Step {
        match self.next_nonspace() {
            Class::Colon => self.to(State::Value),
            other => self.unexpected(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(v: &str) -> bool {
        match check(v.as_bytes()) {
            Ok(Checked::Valid) => true,
            Err(_) => false,
            Ok(Checked::Server) => panic!("{v:?} left to the server"),
        }
    }

    /// Each value's outcome as the server's `json_valid` gave it (MariaDB 10.11).
    #[test]
    fn json_valid_as_mariadb_scans_it() {
        for ok in [
            "1",
            "\"a\"",
            "true",
            "null",
            "1.",
            "-0",
            "1e5",
            "1E+5",
            "{\"a\":1,\"a\":2}",
            "[1]  ",
            " [1]",
            "\"\\u00e9\"",
            "\"\\x\"",
            "\"\\é\"",
            "123456789012345678901234567890",
            "1e400",
            "{}",
            "[]",
            "\"\\/\"",
            "0.0e-0",
            "[-]",
            "[1e]",
            "[1e+]",
            "{\"a\":-}",
            "[1.e5]",
            "{\"  \":1}",
            "{\" a\" :1}",
            "{\"a\":1 }",
            "[1 , 2]",
            "\"\\uD800\\uDC00\"",
            "[true,false,null]",
            "{\"a\":[{\"b\":{}}]}",
            "{\"\t\":1}",
            "0e5",
            "-0E+3",
            "[0e]",
            "{\"a\":0E}",
            "0e ",
        ] {
            assert!(valid(ok), "{ok:?} is valid on the server");
        }
        for bad in [
            "",
            " ",
            "TRUE",
            ".5",
            "01",
            "1e",
            "-",
            "+1",
            "[1,]",
            "{\"a\":1,}",
            "[1] x",
            "'a'",
            "\"\\ud800\"",
            "nul",
            "1 2",
            "NaN",
            "{\"a\"}",
            "-01",
            "[0x]",
            "\"\\u00\"",
            "\"\\uDC00\"",
            "\"\\uD800\\u0041\"",
            "{\"a\t\":1}",
            "\"a\tb\"",
            "[1\u{1}]",
            "[1.5\u{1}1]",
            "0\u{1}",
        ] {
            assert!(!valid(bad), "{bad:?} is refused by the server");
        }
        let nested = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        assert!(valid(&nested(31)));
        assert!(!valid(&nested(32)));
    }

    #[test]
    fn refusals_say_where_and_why() {
        let why = |v: &str| match check(v.as_bytes()) {
            Err(Invalid(why)) => why,
            other => panic!("{v:?}: {other:?}"),
        };
        assert_eq!(
            why("[1,]"),
            "not valid JSON (the column's json_valid check): ']' is not expected at byte 4"
        );
        assert!(why("[1").ends_with("it ends too early"));
        assert!(why("\"\\ud800\"").contains("\\uD800 is a surrogate with no pair"));
    }

    #[test]
    fn any_bytes_are_judged_without_a_panic() {
        let alphabet = b"{}[]:,\"\\-+.0179eEtrufalsn u\t\n\x01\xc3\xa9\xe6\x9d\xb1";
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 12) as usize;
            let v: Vec<u8> = (0..len)
                .map(|k| alphabet[((seed >> (k * 5)) % alphabet.len() as u64) as usize])
                .collect();
            let _ = check(&v);
        }
    }

    #[test]
    fn what_the_servers_scanner_reads_past_its_tables_is_the_servers() {
        assert!(valid("{\"é1\":1}"));
        for v in ["{\"é\":1}", "{\"éu\":1}", "{\"é\\\\\":1}"] {
            assert_eq!(check(v.as_bytes()), Ok(Checked::Server), "{v:?}");
        }
    }
}
