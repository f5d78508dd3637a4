//! The sequences a sandboxed command may not send to the person's real terminal. The pty relay
//! (`terminal.rs`) copies the command's output through [`TerminalFilter`], which passes
//! everything byte for byte (text, colours, cursor movement, titles, hyperlinks, queries)
//! except the control strings that act outside the terminal's screen, on the host:
//!
//! - OSC 52 and kitty's OSC 5522 write the clipboard (the person pastes the command's text
//!   into a shell later), OSC 46 moves xterm's log file, OSC 50 sets its font;
//! - OSC 1337 (iTerm2: `File=` saves a download on the host, `SetUserVar`, `RemoteHost`) and
//!   OSC 5113 (kitty's file transfer);
//! - desktop notifications, shown outside the terminal in the command's words (iTerm2's and
//!   ConEmu's OSC 9, kitty's OSC 99, rxvt's OSC 777);
//! - a DCS that carries another escape: `tmux;` and GNU screen pass their DCS bodies on to the
//!   terminal outside them, so an OSC 52 wrapped that way would reach it (tmux finds `tmux;`
//!   after parameters and intermediates too, and a C1 control such as `U+009D` needs no
//!   escape: a DCS is ended and dropped at one); kitty's remote control (`DCS @kitty-cmd`);
//! - kitty's graphics commands that make the terminal read an image from a path on the host
//!   (`APC G t=f`, `t=t`, `t=s`): the answer tells the command whether a host file exists;
//! - iTerm2's tmux control mode (`DCS 1000p`): iTerm2 then reads the output as tmux's and types
//!   commands back, into whatever reads the terminal after the command;
//! - xterm's window operations (`CSI Ps t`) but the size reports and the title stack: they
//!   move, resize, raise or iconify the window, and `CSI 20 t` and `CSI 21 t` report the icon
//!   label and the title, text the command chose, as if typed: an answer that arrives after the
//!   command ends is read by the person's shell;
//! - colour changes (OSC 4 and 5, the palette; OSC 10 to 19, the default foreground and
//!   background and the like; kitty's OSC 21): with the foreground made the background's
//!   colour, envgit's own question, printed in the default colours, cannot be seen beside a
//!   question of the command's in colours of its own, and the change outlives the command.
//!   Queries (`?`) and resets pass;
//! - the printer (`CSI … i`, media copy): xterm hands what follows to a program on the host;
//! - reads of the screen (`CSI … * y`, DECRQCRA, a rectangle's checksum): the screen holds what
//!   the person's own commands printed before this one.
//!
//! An OSC's number is read as terminals read it, as a number: `OSC 052` is OSC 52 to xterm,
//! kitty and foot (leading zeros are judged away), and a number longer than any a terminal
//! knows (kitty reads five digits and takes the rest for the body) is dropped unjudged.
//!
//! Both the 7-bit forms (`ESC ]`, `ESC P`, `ESC [`, `ESC \`) and the C1 ones (`U+009D`,
//! `U+0090`, `U+009B`, `U+009C`, as UTF-8 or as single bytes outside a UTF-8 sequence) are
//! read. The filter keeps
//! its state between reads, so a sequence split across them is judged whole.

/// OSC numbers that act outside the screen.
const BLOCKED_OSC: [&[u8]; 9] = [
    b"9", b"46", b"50", b"52", b"99", b"777", b"1337", b"5113", b"5522",
];
/// The starts of a DCS a multiplexer hands on (tmux) or that commands kitty.
const DCS_BLOCKED: [&[u8]; 3] = [b"tmux;", b"@kitty", b"1000p"];
/// tmux's passthrough, which it finds after a DCS's parameters and intermediates too.
const TMUX_PASSTHROUGH: &[u8] = b"tmux;";
/// The most parameter and intermediate bytes read before a DCS's `tmux;` (tmux keeps 63).
const DCS_PARAMS_MAX: usize = 64;
/// The window operations (`CSI Ps t`) that stay on the screen: the size reports (numbers the
/// terminal chose) and saving and restoring the title (vim, tmux).
const WINDOW_OPS_KEPT: [u32; 7] = [14, 15, 16, 18, 19, 22, 23];
/// OSC numbers that set colours: their body is read whole and passed on only when it asks
/// (`?`) or resets, never sets.
const COLOUR_OSC: [&[u8]; 13] = [
    b"4", b"5", b"10", b"11", b"12", b"13", b"14", b"15", b"16", b"17", b"18", b"19", b"21",
];
/// The longest colour OSC judged (a query of all 256 palette entries at once is about 2 KiB);
/// a longer one is dropped whole.
const COLOUR_BODY_MAX: usize = 8192;
/// The longest control sequence (`CSI` …) judged; a longer one is dropped whole.
const CSI_MAX: usize = 256;
/// How many bytes of an APC's head (kitty's graphics keys) are read before it is judged.
const APC_HEAD_MAX: usize = 512;
/// How many bytes of a DCS's start are read before it is judged.
const HEAD_MAX: usize = 12;
/// The most digits an OSC number has: kitty reads five and takes what follows for the body
/// (`OSC 000527;…` is its OSC 52), xterm reads them all; a longer one is dropped.
const OSC_DIGITS_MAX: usize = 5;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Osc,
    Dcs,
    Apc,
}

#[derive(Debug)]
enum State {
    /// Text and every other sequence: passed on.
    Ground,
    /// After `ESC` in the ground state.
    Escape,
    /// After a C1 control's UTF-8 lead byte (`0xC2`).
    Lead,
    /// Reading the start of a control string (its introducer is in `held`).
    Head(Kind),
    /// Inside a control sequence (`CSI`), held in `held` up to its final byte; `over` once it
    /// outgrew [`CSI_MAX`].
    Csi { over: bool },
    /// Inside a colour OSC, held in `held` to its end, then judged whole; `esc` and `lead` as
    /// below.
    Colour { esc: bool, lead: bool },
    /// Inside a control string that is passed on; `esc` when its last byte was `ESC`.
    Pass { kind: Kind, esc: bool, lead: bool },
    /// Inside a control string that is dropped, up to and with its terminator.
    Drop { kind: Kind, esc: bool, lead: bool },
}

/// A streaming filter of the command's output (see the module's documentation).
pub struct TerminalFilter {
    state: State,
    /// The bytes of a control string not yet judged: its introducer and start.
    held: Vec<u8>,
    /// UTF-8 continuation bytes still expected in the ground state.
    continuation: u8,
}

impl Default for TerminalFilter {
    fn default() -> Self {
        Self::new()
    }
}

impl TerminalFilter {
    pub fn new() -> Self {
        Self {
            state: State::Ground,
            held: Vec::new(),
            continuation: 0,
        }
    }

    /// Appends to `out` what of `input` may reach the terminal.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            self.byte(b, out);
        }
    }

    fn byte(&mut self, b: u8, out: &mut Vec<u8>) {
        match self.state {
            State::Ground => self.ground(b, out),
            State::Escape => {
                self.state = State::Ground;
                match b {
                    b']' => self.open(Kind::Osc, &[ESC, b]),
                    b'P' => self.open(Kind::Dcs, &[ESC, b]),
                    b'_' => self.open(Kind::Apc, &[ESC, b]),
                    b'[' => self.open_csi(&[ESC, b]),
                    // A second escape starts afresh; the first one alone does nothing.
                    ESC => self.state = State::Escape,
                    _ => {
                        out.push(ESC);
                        self.ground(b, out);
                    }
                }
            }
            State::Lead => {
                self.state = State::Ground;
                match b {
                    0x9d => self.open(Kind::Osc, &[0xc2, b]),
                    0x90 => self.open(Kind::Dcs, &[0xc2, b]),
                    0x9f => self.open(Kind::Apc, &[0xc2, b]),
                    0x9b => self.open_csi(&[0xc2, b]),
                    _ => {
                        out.push(0xc2);
                        self.continuation = 1;
                        self.ground(b, out);
                    }
                }
            }
            State::Head(kind) => self.head(kind, b, out),
            State::Csi { over } => self.csi(over, b, out),
            State::Colour { esc, lead } => self.colour(esc, lead, b, out),
            State::Pass { kind, esc, lead } => self.pass(kind, esc, lead, b, out),
            State::Drop { kind, esc, lead } => self.drop_byte(kind, esc, lead, b, out),
        }
    }

    fn ground(&mut self, b: u8, out: &mut Vec<u8>) {
        if self.continuation > 0 && (0x80..0xc0).contains(&b) {
            self.continuation -= 1;
            out.push(b);
            return;
        }
        self.continuation = 0;
        match b {
            ESC => self.state = State::Escape,
            0xc2 => self.state = State::Lead,
            // Single-byte C1 outside a UTF-8 sequence: a terminal in an 8-bit mode reads them.
            0x9d => self.open(Kind::Osc, &[b]),
            0x90 => self.open(Kind::Dcs, &[b]),
            0x9f => self.open(Kind::Apc, &[b]),
            0x9b => self.open_csi(&[b]),
            _ => {
                self.continuation = match b {
                    0xc3..=0xdf => 1,
                    0xe0..=0xef => 2,
                    0xf0..=0xf4 => 3,
                    _ => 0,
                };
                out.push(b);
            }
        }
    }

    fn open(&mut self, kind: Kind, introducer: &[u8]) {
        self.held.clear();
        self.held.extend_from_slice(introducer);
        self.state = State::Head(kind);
    }

    fn open_csi(&mut self, introducer: &[u8]) {
        self.held.clear();
        self.held.extend_from_slice(introducer);
        self.state = State::Csi { over: false };
    }

    /// A control sequence is held up to its final byte, then passed on whole or dropped.
    /// Terminals carry out C0 controls met inside one and go on reading it (`ESC [ 2 CR 1 t`
    /// is `CSI 21 t` to xterm): those are passed on at once, the sequence still held.
    fn csi(&mut self, over: bool, b: u8, out: &mut Vec<u8>) {
        match b {
            // Parameters and intermediates.
            0x20..=0x3f => {
                if over || self.held.len() >= CSI_MAX {
                    self.state = State::Csi { over: true };
                } else {
                    self.held.push(b);
                }
            }
            0x40..=0x7e => {
                let start = self.body_start();
                if !over && !acts_outside_the_screen(&self.held[start..], b) {
                    out.append(&mut self.held);
                    out.push(b);
                }
                self.held.clear();
                self.state = State::Ground;
            }
            // An escape, CAN or SUB cancels the sequence in a terminal; anything else that is
            // not part of one (a byte past ASCII) leaves it malformed. Neither is passed on.
            ESC | CAN | SUB | 0x80..=0xff => {
                self.held.clear();
                self.state = State::Ground;
                if b != CAN && b != SUB {
                    self.ground(b, out);
                }
            }
            // Other C0 controls and DEL.
            _ => out.push(b),
        }
    }

    /// The start of a control string: held until it can be judged.
    fn head(&mut self, kind: Kind, b: u8, out: &mut Vec<u8>) {
        let start = self.body_start();
        let allowed = match kind {
            // The number ends at `;` or at anything else that is not a digit.
            Kind::Osc if b.is_ascii_digit() && self.held.len() - start < OSC_DIGITS_MAX => {
                self.held.push(b);
                return;
            }
            // A number longer than any a terminal knows: not judged, dropped.
            Kind::Osc if b.is_ascii_digit() => false,
            Kind::Osc if COLOUR_OSC.contains(&osc_number(&self.held[start..])) => {
                self.state = State::Colour {
                    esc: false,
                    lead: false,
                };
                self.byte(b, out);
                return;
            }
            Kind::Osc => !BLOCKED_OSC.contains(&osc_number(&self.held[start..])),
            Kind::Dcs => {
                self.held.push(b);
                let body = &self.held[start..];
                // tmux takes `tmux;` after any parameters and intermediates (`ESC P 1 tmux;`
                // passes on as `ESC P tmux;` does): they are skipped before the match.
                let after_params = skip_dcs_params(body);
                if DCS_BLOCKED.iter().any(|p| body.starts_with(p))
                    || after_params.starts_with(TMUX_PASSTHROUGH)
                {
                    self.held.clear();
                    self.state = State::Drop {
                        kind,
                        esc: false,
                        lead: false,
                    };
                    return;
                }
                if (DCS_BLOCKED.iter().any(|p| p.starts_with(body)) && body.len() < HEAD_MAX)
                    || (TMUX_PASSTHROUGH.starts_with(after_params)
                        && body.len() < DCS_PARAMS_MAX + TMUX_PASSTHROUGH.len())
                {
                    return;
                }
                // Parameters past any a multiplexer reads: not judged, dropped.
                if TMUX_PASSTHROUGH.starts_with(after_params) {
                    self.held.clear();
                    self.state = State::Drop {
                        kind,
                        esc: false,
                        lead: false,
                    };
                    return;
                }
                // Judged: the byte read is part of what is passed on, read as such.
                self.held.pop();
                true
            }
            // kitty's graphics command: its keys end at `;` (then the payload) or at the end.
            Kind::Apc if !ends_a_head(b) && self.held.len() - start < APC_HEAD_MAX => {
                self.held.push(b);
                return;
            }
            // Past the longest head a command has, it is not judged: dropped.
            Kind::Apc if !ends_a_head(b) => false,
            Kind::Apc => !reads_a_host_file(&self.held[start..]),
        };
        if allowed {
            out.append(&mut self.held);
            self.state = State::Pass {
                kind,
                esc: false,
                lead: false,
            };
        } else {
            self.held.clear();
            self.state = State::Drop {
                kind,
                esc: false,
                lead: false,
            };
        }
        self.byte(b, out);
    }

    /// A colour OSC's byte: held until its terminator, then passed on with it when it only
    /// asks or resets. An escape other than ST ends it there, as in [`Self::pass`]; CAN and
    /// SUB cancel it (nothing to pass on).
    fn colour(&mut self, esc: bool, lead: bool, b: u8, out: &mut Vec<u8>) {
        let end: &[u8] = match b {
            _ if esc => &[ESC, b'\\'],
            0x9c if lead => &[0xc2, 0x9c],
            _ if lead => {
                self.hold_colour(&[0xc2, b]);
                return;
            }
            ESC | 0xc2 => {
                self.state = State::Colour {
                    esc: b == ESC,
                    lead: b == 0xc2,
                };
                return;
            }
            BEL => &[BEL],
            0x9c => &[0x9c],
            CAN | SUB => {
                self.held.clear();
                self.state = State::Ground;
                return;
            }
            _ => {
                self.hold_colour(&[b]);
                return;
            }
        };
        let start = self.body_start();
        if only_asks_or_resets(&self.held[start..]) {
            out.append(&mut self.held);
            out.extend_from_slice(end);
        }
        self.held.clear();
        self.state = State::Ground;
        if esc && b != b'\\' {
            // The escape that ended the string starts what follows.
            self.state = State::Escape;
            self.byte(b, out);
        }
    }

    /// Part of a colour OSC's body; past [`COLOUR_BODY_MAX`] the string is dropped unjudged.
    fn hold_colour(&mut self, bytes: &[u8]) {
        self.held.extend_from_slice(bytes);
        self.state = if self.held.len() > COLOUR_BODY_MAX {
            self.held.clear();
            State::Drop {
                kind: Kind::Osc,
                esc: false,
                lead: false,
            }
        } else {
            State::Colour {
                esc: false,
                lead: false,
            }
        };
    }

    fn body_start(&self) -> usize {
        match self.held.first() {
            Some(&ESC) | Some(&0xc2) => 2,
            _ => 1,
        }
    }

    fn pass(&mut self, kind: Kind, esc: bool, lead: bool, b: u8, out: &mut Vec<u8>) {
        if esc {
            if b == b'\\' {
                out.extend_from_slice(&[ESC, b]);
                self.state = State::Ground;
                return;
            }
            // Another escape inside the string. A terminal ends the string there; a
            // multiplexer passing a DCS on would hand the escape to the terminal outside it.
            // The string is ended here, and for a DCS the rest of it is dropped.
            out.extend_from_slice(&[ESC, b'\\']);
            if kind == Kind::Dcs {
                self.state = State::Drop {
                    kind,
                    esc: false,
                    lead: false,
                };
                return;
            }
            self.state = State::Escape;
            self.byte(b, out);
            return;
        }
        // A C1 control other than ST inside a DCS (`U+009D`, an OSC's introducer): a
        // multiplexer passing the DCS on hands it to the terminal outside, which reads it as
        // the control. Ended and dropped as an escape is.
        if lead && kind == Kind::Dcs && (0x80..=0x9f).contains(&b) && b != 0x9c {
            out.extend_from_slice(&[ESC, b'\\']);
            self.state = State::Drop {
                kind,
                esc: false,
                lead: false,
            };
            return;
        }
        if lead {
            out.push(0xc2);
            out.push(b);
            self.state = if b == 0x9c {
                State::Ground
            } else {
                State::Pass {
                    kind,
                    esc: false,
                    lead: false,
                }
            };
            return;
        }
        match b {
            ESC => {
                self.state = State::Pass {
                    kind,
                    esc: true,
                    lead: false,
                }
            }
            0xc2 => {
                self.state = State::Pass {
                    kind,
                    esc: false,
                    lead: true,
                }
            }
            b if is_string_end(b) || (kind == Kind::Osc && b == BEL) => {
                out.push(b);
                self.state = State::Ground;
            }
            b => out.push(b),
        }
    }

    /// A dropped string ends at its own terminator. An escape inside an OSC ends it, as in a
    /// terminal, and what follows is judged afresh; inside a DCS only ST ends it (tmux and
    /// screen read escapes inside theirs as the payload they hand on).
    fn drop_byte(&mut self, kind: Kind, esc: bool, lead: bool, b: u8, out: &mut Vec<u8>) {
        let dropping = |esc, lead| State::Drop { kind, esc, lead };
        if esc {
            if b == b'\\' {
                self.state = State::Ground;
            } else if kind == Kind::Osc {
                self.state = State::Escape;
                self.byte(b, out);
            } else {
                // `ESC ESC` is tmux's escaped escape: both are payload.
                self.state = dropping(false, false);
            }
            return;
        }
        if lead && b == 0x9c {
            self.state = State::Ground;
            return;
        }
        self.state = match b {
            ESC => dropping(true, false),
            0xc2 => dropping(false, true),
            BEL if kind == Kind::Osc => State::Ground,
            b if is_string_end(b) => State::Ground,
            _ => dropping(false, false),
        };
    }
}

/// A colour OSC's body (`number;…`) that only asks for colours (`?`) or resets them: OSC 4
/// and 5 take index and colour pairs, OSC 10 to 19 colours in turn, kitty's OSC 21
/// `key=value` items (`key=?` asks, `key=` and `key` reset).
fn only_asks_or_resets(body: &[u8]) -> bool {
    let mut fields = body.split(|&b| b == b';');
    let number = fields.next().unwrap_or_default();
    let rest: Vec<&[u8]> = fields.collect();
    match osc_number(number) {
        b"4" | b"5" => rest.iter().skip(1).step_by(2).all(|spec| *spec == b"?"),
        b"21" => rest
            .iter()
            .all(|item| match item.iter().position(|&b| b == b'=') {
                Some(at) => matches!(&item[at + 1..], b"" | b"?"),
                None => true,
            }),
        _ => rest.iter().all(|spec| *spec == b"?"),
    }
}

/// A DCS's body without its leading parameters and intermediates (`0x20`–`0x3f`).
fn skip_dcs_params(body: &[u8]) -> &[u8] {
    let n = body
        .iter()
        .take_while(|b| (0x20..=0x3f).contains(*b))
        .count();
    &body[n..]
}

/// An OSC's number as terminals read it (they parse it, `052` is 52): its digits without
/// leading zeros, `0` for zeros alone, empty for none.
fn osc_number(digits: &[u8]) -> &[u8] {
    let first = digits
        .iter()
        .position(|&d| d != b'0')
        .unwrap_or(digits.len().saturating_sub(1));
    &digits[first..]
}

/// A control sequence (its parameters and intermediates, then `last`, its final byte) that acts
/// outside the terminal's screen: a window operation other than a size report or the title
/// stack, the printer, or a read of the screen's text. A window operation whose first parameter is not a plain number is
/// not judged: dropped.
fn acts_outside_the_screen(params: &[u8], last: u8) -> bool {
    let private = params.first().is_some_and(|b| b"<=>?".contains(b));
    let plain = !private && !params.iter().any(|b| (0x20..0x30).contains(b));
    match last {
        b'i' => true,
        // DECRQCRA: the checksum of a rectangle of the screen, which shows what the person's
        // own commands left there (one cell's checksum is its character).
        b'y' => params.ends_with(b"*"),
        b't' if plain => {
            let first = params.split(|&b| b == b';').next().unwrap_or_default();
            let number = (!first.is_empty() && first.iter().all(u8::is_ascii_digit)).then(|| {
                first.iter().fold(0u32, |n, d| {
                    n.saturating_mul(10).saturating_add(u32::from(d - b'0'))
                })
            });
            !number.is_some_and(|n| WINDOW_OPS_KEPT.contains(&n))
        }
        _ => false,
    }
}

/// Where an APC's head ends: its payload's `;`, or the string's end.
fn ends_a_head(b: u8) -> bool {
    b == b';' || b == ESC || b == 0xc2 || b == BEL || is_string_end(b)
}

/// A kitty graphics command (`G` then `key=value,…`) whose image the terminal is to read from
/// a path on the host (`t=f`, a file; `t=t`, a temporary file it then deletes; `t=s`, shared
/// memory): its answer tells the command whether the path exists.
fn reads_a_host_file(head: &[u8]) -> bool {
    head.strip_prefix(b"G").is_some_and(|keys| {
        keys.split(|&b| b == b',')
            .any(|kv| matches!(kv, b"t=f" | b"t=t" | b"t=s"))
    })
}

/// Ends any control string: ST as one byte, and CAN and SUB, which cancel it.
fn is_string_end(b: u8) -> bool {
    matches!(b, CAN | SUB | 0x9c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filtered(input: &[u8]) -> Vec<u8> {
        let mut whole = Vec::new();
        TerminalFilter::new().feed(input, &mut whole);
        // The same bytes one at a time: a sequence split across reads is judged the same.
        let mut f = TerminalFilter::new();
        let mut bytewise = Vec::new();
        for b in input {
            f.feed(std::slice::from_ref(b), &mut bytewise);
        }
        assert_eq!(
            String::from_utf8_lossy(&whole),
            String::from_utf8_lossy(&bytewise),
            "split reads differ for {input:?}"
        );
        whole
    }

    #[test]
    fn text_colours_titles_links_and_queries_pass_unchanged() {
        for input in [
            &b"plain text\r\n"[..],
            "ünïcödé ” — 日本語 🦀\n".as_bytes(),
            b"\x1b[1;31mred\x1b[0m \x1b[2K\x1b[1A\x1b[?25l",
            b"\x1b]0;a title\x07\x1b]2;another\x1b\\",
            b"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\",
            b"\x1b]7;file://host/dir\x07",
            b"\x1bP$qm\x1b\\\x1bP+q544e\x1b\\",
            b"\x1b]10;?\x07\x1b]4;1;?\x07",
            b"\x1b]00;zero title\x07\x1b]010;?\x07\x1b]04;1;?\x07",
            // Colour queries and resets.
            b"\x1b]11;?\x1b\\\x1b]10;?;?\x07\x1b]4;1;?;2;?\x07\x1b]104;1\x07\x1b]110\x1b\\",
            b"\x1b]21;foreground=?;background=;cursor\x1b\\",
            "\u{9d}11;?\u{9c}".as_bytes(),
            // The whole palette asked for at once.
            &(0..256)
                .map(|i| format!(";{i};?"))
                .fold("\x1b]4".to_owned(), |s, q| s + &q)
                .into_bytes()
                .into_iter()
                .chain(*b"\x1b\\")
                .collect::<Vec<u8>>(),
            b"\x1b_Ga=T,f=100,t=d;iVBORw0KGgo=\x1b\\",
            b"\x1b_Ga=d\x1b\\",
            "\u{9b}1m C1 CSI \u{9d}0;t\u{9c}".as_bytes(),
            b"\x1b[22;0t\x1b[18t\x1b[14;2t\x1b[019t\x1b[23;0t",
            b"\x1b[6n\x1b[c\x1b[>c\x1b[?1$p\x1b[>q\x1b[3 q\x1b[>4;1m\x1b[?2004h",
            b"\x1b]52", // unfinished at the end: nothing judged yet, nothing shown
        ] {
            let out = filtered(input);
            if input == b"\x1b]52" {
                assert!(out.is_empty(), "{out:?}");
            } else {
                assert_eq!(out, input, "{}", String::from_utf8_lossy(input));
            }
        }
    }

    #[test]
    fn clipboard_file_and_passthrough_sequences_are_dropped() {
        for (input, left) in [
            (&b"a\x1b]52;c;ZWNobyBwd25lZA==\x07b"[..], &b"ab"[..]),
            (b"a\x1b]52;c;ZWNobyBwd25lZA==\x1b\\b", b"ab"),
            (b"a\x1b]1337;File=name=eA==;inline=0:aGk=\x07b", b"ab"),
            (b"a\x1b]5113;ac=send;id=1\x1b\\b", b"ab"),
            (b"a\x1b]5522;type=write\x07b", b"ab"),
            (b"a\x1b]46;/tmp/log\x07b", b"ab"),
            (b"a\x1b]50;font\x07b", b"ab"),
            (b"a\x1b]9;run envgit approve 3\x07b", b"ab"),
            (b"a\x1b]99;;run envgit approve 3\x1b\\b", b"ab"),
            (b"a\x1b]777;notify;envgit;approve 3\x07b", b"ab"),
            ("a\u{9d}52;c;eA==\u{9c}b".as_bytes(), b"ab"),
            (b"a\x9d52;c;eA==\x9cb", b"ab"),
            (b"a\x1bPtmux;\x1b\x1b]52;c;eA==\x07\x1b\\b", b"ab"),
            (b"a\x1bP@kitty-cmd{\"cmd\":\"ls\"}\x1b\\b", b"ab"),
            // CAN ends a dropped string; what follows shows.
            (b"a\x1b]52;c;eA==\x18b", b"ab"),
            (b"a\x1b_Ga=T,t=f;L3Jvb3QvLnNzaC9pZF9yc2E=\x1b\\b", b"ab"),
            (b"a\x1b_Gi=1,t=t,f=100;eA==\x1b\\b", b"ab"),
            ("a\u{9f}Gt=s;eA==\u{9c}b".as_bytes(), b"ab"),
            // Reports of the title and icon label, whatever the number's form, 7-bit or C1.
            (b"a\x1b[21tb", b"ab"),
            (b"a\x1b[20tb", b"ab"),
            (b"a\x1b[0021;0tb", b"ab"),
            (b"a\x9b21tb", b"ab"),
            ("a\u{9b}21tb".as_bytes(), b"ab"),
            // A control inside is carried out; the sequence around it is still judged whole.
            (b"a\x1b[2\r1tb", b"a\rb"),
            // Window operations, and numbers that are not plain.
            (
                b"a\x1b[3;0;0t\x1b[9;1t\x1b[2t\x1b[8;50;200t\x1b[24tb",
                b"ab",
            ),
            (b"a\x1b[t\x1b[:21t\x1b[99999999999999999999tb", b"ab"),
            // Colours set: the default foreground and background, the palette, kitty's.
            (b"a\x1b]10;#000000\x07\x1b]11;rgb:00/00/00\x1b\\b", b"ab"),
            (b"a\x1b]4;1;?;2;#ff0000\x07\x1b]10;?;#000\x07b", b"ab"),
            (b"a\x1b]21;foreground=red\x07\x1b]5;0;black\x07b", b"ab"),
            (b"a\x9d10;black\x9cb", b"ab"),
            ("a\u{9d}11;bl\u{e4}ck\u{9c}b".as_bytes(), b"ab"),
            // Cancelled: nothing to pass on.
            (b"a\x1b]10;?\x18b", b"ab"),
            // A read of the screen; other `y` sequences stay.
            (b"a\x1b[1;1;1;1;1;1*y\x1b[2;1yb", b"a\x1b[2;1yb"),
            // The printer.
            (b"a\x1b[5i\x1b[?5i\x1b[0i\x1b[4ib", b"ab"),
            // iTerm2's tmux control mode, whole.
            (b"a\x1bP1000p%begin 1 1 1\r\n%exit\r\n\x1b\\b", b"ab"),
            // The number as terminals read it: leading zeros are no other number, and one
            // longer than any terminal knows is dropped (kitty reads `000527` as 52).
            (b"a\x1b]052;c;eA==\x07b", b"ab"),
            (b"a\x1b]00052;c;eA==\x1b\\b", b"ab"),
            (b"a\x9d052;c;eA==\x9cb", b"ab"),
            (b"a\x1b]01337;File=name=eA==:aGk=\x07b", b"ab"),
            (b"a\x1b]09;run envgit approve 3\x07b", b"ab"),
            (b"a\x1b]010;#000000\x07\x1b]004;1;#ff0000\x07b", b"ab"),
            (
                b"a\x1b]000527;c;eA==\x07\x1b]000000000052;c;eA==\x07b",
                b"ab",
            ),
            // tmux's passthrough after parameters or intermediates, and a C1 OSC carried in
            // a DCS (GNU screen hands any DCS on; tmux its `tmux;` ones).
            ("a\x1bP1tmux;\u{9d}52;c;eA==\x07\x1b\\b".as_bytes(), b"ab"),
            ("a\x1bP$tmux;\u{9d}52;c;eA==\x07\x1b\\b".as_bytes(), b"ab"),
            ("a\x1bP1;2;3;4;5;6;7tmux;x\x1b\\b".as_bytes(), b"ab"),
            (
                "a\x1bP\u{9d}52;c;eA==\x07\x1b\\b".as_bytes(),
                b"a\x1bP\x1b\\b",
            ),
        ] {
            assert_eq!(
                String::from_utf8_lossy(&filtered(input)),
                String::from_utf8_lossy(left),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
    }

    /// A sequence longer than any a program sends is not judged but dropped; one cut by an
    /// escape, CAN or a byte past ASCII is dropped, and what cut it is read afresh.
    #[test]
    fn long_and_cut_sequences_are_dropped() {
        let mut long = b"a\x1b[".to_vec();
        long.extend(std::iter::repeat_n(b'0', CSI_MAX));
        long.extend_from_slice(b"21tb");
        assert_eq!(String::from_utf8_lossy(&filtered(&long)), "ab");
        let out = filtered(b"a\x1b[21\x1b[1mb\x1b[2\x18c\x1b[2\xc3\xa9d");
        assert_eq!(String::from_utf8_lossy(&out), "a\x1b[1mbc\u{e9}d");
        // A colour OSC cut by an escape is judged as it stands; the escape starts what follows.
        let out = filtered(b"\x1b]10;?\x1b[1mX\x1b]10;#000\x1b[2mY");
        assert_eq!(
            String::from_utf8_lossy(&out),
            "\x1b]10;?\x1b\\\x1b[1mX\x1b[2mY"
        );
        let mut long = b"a\x1b]10;".to_vec();
        long.extend(std::iter::repeat_n(b'?', COLOUR_BODY_MAX));
        long.extend_from_slice(b"\x07b");
        assert_eq!(String::from_utf8_lossy(&filtered(&long)), "ab");
        // A C0 control inside a passed sequence is carried out first, as a terminal would.
        let out = filtered(b"\x1b[1\x07;31mred");
        assert_eq!(String::from_utf8_lossy(&out), "\x07\x1b[1;31mred");
    }

    /// GNU screen hands a DCS's body to the terminal outside it: an escape inside a DCS ends
    /// the DCS there, and the rest of it is dropped.
    #[test]
    fn an_escape_inside_a_dcs_ends_it_and_drops_the_rest() {
        let out = filtered(b"a\x1bP\x1b]52;c;eA==\x07\x1b\\b");
        assert_eq!(String::from_utf8_lossy(&out), "a\x1bP\x1b\\b");
    }

    /// An escape that ends a dropped OSC early is read afresh: a clipboard write behind an
    /// allowed sequence, or behind a dropped one, is dropped as well.
    #[test]
    fn what_follows_a_cut_string_is_judged_too() {
        let out = filtered(b"\x1b]52;c;eA==\x1b]52;c;eA==\x07ok");
        assert_eq!(String::from_utf8_lossy(&out), "ok");
        let out = filtered(b"\x1b]0;title\x1b]52;c;eA==\x07ok");
        assert_eq!(String::from_utf8_lossy(&out), "\x1b]0;title\x1b\\ok");
    }
}
