//! The parser of the topology text format (the module docs of `topology` describe it): lines
//! to tokens, records to nodes and links, each inconsistency a [`ParseError`] naming its line.

use std::collections::BTreeMap;

use super::*;

/// A token of the code part of a line (before any `#`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token<'a> {
    /// A bare word.
    Word(&'a str),
    /// A `"quoted"` string, without the quotes.
    Quoted(&'a str),
    /// `[n]`, the text between the brackets.
    Bracket(&'a str),
    /// `(guid)`, the text between the parentheses.
    Paren(&'a str),
}

/// Splits a line at the first `#` outside quotes: (code, comment).
fn split_comment(line: &str) -> (&str, Option<&str>) {
    let mut quoted = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '#' if !quoted => return (&line[..i], Some(&line[i + 1..])),
            _ => {}
        }
    }
    (line, None)
}

/// Tokenizes the code part of a line; an unclosed quote, bracket or parenthesis is an error.
fn tokenize(code: &str) -> Result<Vec<Token<'_>>, String> {
    let mut tokens = Vec::new();
    let mut rest = code;
    loop {
        rest = rest.trim_start();
        let Some(c) = rest.chars().next() else {
            return Ok(tokens);
        };
        let close = match c {
            '"' => Some('"'),
            '[' => Some(']'),
            '(' => Some(')'),
            _ => None,
        };
        match close {
            Some(close) => {
                let end = rest[1..]
                    .find(close)
                    .map(|i| i + 1)
                    .ok_or_else(|| format!("'{c}' without a closing '{close}'"))?;
                let inner = &rest[1..end];
                tokens.push(match c {
                    '"' => Token::Quoted(inner),
                    '[' => Token::Bracket(inner),
                    _ => Token::Paren(inner),
                });
                rest = &rest[end + 1..];
            }
            None => {
                let end = rest
                    .find(|ch: char| ch.is_whitespace() || matches!(ch, '"' | '[' | '('))
                    .unwrap_or(rest.len());
                tokens.push(Token::Word(&rest[..end]));
                rest = &rest[end..];
            }
        }
    }
}

/// Tokenizes a comment leniently into words and quoted strings (an unclosed quote runs to the
/// end); never fails, because a comment is free text.
fn comment_tokens(comment: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut rest = comment;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            return tokens;
        }
        if let Some(after) = rest.strip_prefix('"') {
            let end = after.find('"').unwrap_or(after.len());
            tokens.push(Token::Quoted(&after[..end]));
            rest = after.get(end + 1..).unwrap_or_default();
        } else {
            let end = rest
                .find(|ch: char| ch.is_whitespace() || ch == '"')
                .unwrap_or(rest.len());
            tokens.push(Token::Word(&rest[..end]));
            rest = &rest[end..];
        }
    }
}

/// A number as ibsim reads them: `0x` hex or decimal.
fn parse_u64(text: &str) -> Option<u64> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        if hex.is_empty() {
            return None;
        }
        u64::from_str_radix(hex, 16).ok()
    } else if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        t.parse().ok()
    } else {
        None
    }
}

fn parse_port_number(text: &str, line: usize, what: &str) -> Result<u8, ParseError> {
    match parse_u64(text) {
        Some(p) if (1..=u64::from(MAX_PORTS)).contains(&p) => Ok(p as u8),
        _ => Err(ParseError::new(
            line,
            format!("{what} \"{text}\" is not a port number 1..={MAX_PORTS}"),
        )),
    }
}

/// A port line as read, before the other end is known.
#[derive(Debug, Clone)]
struct PortLine {
    line: usize,
    node: usize,
    port: u8,
    remote_id: String,
    remote_port: u8,
    width: Option<LinkWidth>,
    speed: Option<LinkSpeed>,
    default_rate: LinkRate,
}

#[derive(Debug)]
pub(super) struct Parser {
    topology: Topology,
    next_ca_guid: u64,
    next_switch_guid: u64,
    vendor_once: Option<u32>,
    sysimg_once: Option<u64>,
    device_id: u16,
    default_rate: LinkRate,
    /// The node whose record is open.
    current: Option<usize>,
    /// The header line of each node.
    header_lines: Vec<usize>,
    port_lines: BTreeMap<(usize, u8), PortLine>,
    port_order: Vec<(usize, u8)>,
}

impl Default for Parser {
    fn default() -> Parser {
        Parser {
            topology: Topology::new(),
            next_ca_guid: DEFAULT_CA_GUID_BASE,
            next_switch_guid: DEFAULT_SWITCH_GUID_BASE,
            vendor_once: None,
            sysimg_once: None,
            device_id: 0,
            default_rate: LinkRate::DEFAULT,
            current: None,
            header_lines: Vec::new(),
            port_lines: BTreeMap::new(),
            port_order: Vec::new(),
        }
    }
}

impl Parser {
    pub(super) fn run(mut self, text: &str) -> Result<Topology, ParseError> {
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let t = raw.trim();
            if t.is_empty() {
                self.current = None;
            } else if t.starts_with('#') {
                // A comment; it does not end the record.
            } else if t.starts_with('[') {
                self.port_line(line, t)?;
            } else if t.starts_with('@') {
                return Err(ParseError::new(
                    line,
                    "'@' alias port lines are not supported",
                ));
            } else {
                self.current = None;
                self.record_or_setting(line, t)?;
            }
        }
        self.link_all()?;
        Ok(self.topology)
    }

    fn record_or_setting(&mut self, line: usize, t: &str) -> Result<(), ParseError> {
        let first = t.split_whitespace().next().unwrap_or_default();
        match first {
            "Switch" | "Ca" | "Hca" => return self.node_header(line, t),
            "Rt" => return Err(ParseError::new(line, "router nodes (Rt) are not supported")),
            "include" | "do" => {
                return Err(ParseError::new(
                    line,
                    format!("'{first}' is not supported (the text must be self-contained)"),
                ))
            }
            _ => {}
        }
        let Some((key, value)) = t.split_once('=') else {
            return Err(ParseError::new(
                line,
                format!("expected a node record, a port line or a setting, found \"{t}\""),
            ));
        };
        let key = key.trim();
        // ibnetdiscover writes `switchguid=0x<guid>(<port guid>)`; the part in parentheses is
        // informational, like the GUIDs of port lines.
        let value = value.split('(').next().unwrap_or_default().trim();
        let number = |what: &str| {
            parse_u64(value).ok_or_else(|| {
                ParseError::new(line, format!("{what} value \"{value}\" is not a number"))
            })
        };
        let guid_base = |current: u64| -> Result<u64, ParseError> {
            match value.strip_prefix('+') {
                Some(rel) => parse_u64(rel)
                    .and_then(|n| current.checked_add(n))
                    .ok_or_else(|| {
                        ParseError::new(line, format!("{key} value \"{value}\" is not +<number>"))
                    }),
                None => number(key),
            }
        };
        match key {
            "caguid" | "hcaguids" => self.next_ca_guid = guid_base(self.next_ca_guid)?,
            "switchguid" => self.next_switch_guid = guid_base(self.next_switch_guid)?,
            "rtguid" => {
                guid_base(0)?;
            }
            "sysimgguid" => self.sysimg_once = Some(number(key)?),
            "vendid" => {
                let v = number(key)?;
                if v > 0x00FF_FFFF {
                    return Err(ParseError::new(
                        line,
                        format!("vendid {value} does not fit 24 bits"),
                    ));
                }
                self.vendor_once = Some(v as u32);
            }
            "devid" => {
                let v = number(key)?;
                self.device_id = u16::try_from(v).map_err(|_| {
                    ParseError::new(line, format!("devid {value} does not fit 16 bits"))
                })?;
            }
            "width" => {
                let w = u8::try_from(number(key)?)
                    .ok()
                    .and_then(LinkWidth::widest_in_mask)
                    .ok_or_else(|| {
                        ParseError::new(line, format!("width {value} is not a LinkWidth mask"))
                    })?;
                self.default_rate.width = w;
            }
            "speed" => {
                let s = u8::try_from(number(key)?)
                    .ok()
                    .and_then(LinkSpeed::fastest_in_mask)
                    .ok_or_else(|| {
                        ParseError::new(line, format!("speed {value} is not a LinkSpeed mask"))
                    })?;
                self.default_rate.speed = s;
            }
            "extspeed" => {
                let v = number(key)?;
                if v != 0 {
                    let s = u8::try_from(v)
                        .ok()
                        .and_then(LinkSpeed::fastest_in_ext_mask)
                        .ok_or_else(|| {
                            ParseError::new(
                                line,
                                format!("extspeed {value} is not a LinkSpeedExt mask"),
                            )
                        })?;
                    self.default_rate.speed = s;
                }
            }
            "module" => {
                return Err(ParseError::new(line, "module= is not supported"));
            }
            _ => return Err(ParseError::new(line, format!("unknown setting \"{key}\""))),
        }
        Ok(())
    }

    fn node_header(&mut self, line: usize, t: &str) -> Result<(), ParseError> {
        let (code, comment) = split_comment(t);
        let tokens = tokenize(code).map_err(|e| ParseError::new(line, e))?;
        let mut it = tokens.into_iter();
        let kind = match it.next() {
            Some(Token::Word("Switch")) => NodeKind::Switch,
            _ => NodeKind::Ca,
        };
        let num_ports = match it.next() {
            Some(Token::Word(w)) => match parse_u64(w) {
                Some(n) if (1..=u64::from(MAX_PORTS)).contains(&n) => n as u8,
                _ => {
                    return Err(ParseError::new(
                        line,
                        format!("port count \"{w}\" is not a number 1..={MAX_PORTS}"),
                    ))
                }
            },
            _ => {
                return Err(ParseError::new(
                    line,
                    format!("expected the port count after {}", kind.keyword()),
                ))
            }
        };
        let id = match it.next() {
            Some(Token::Quoted(id)) => id.to_string(),
            _ => {
                return Err(ParseError::new(
                    line,
                    "expected the quoted node id after the port count",
                ))
            }
        };
        let mut description = None;
        let mut enhanced = false;
        let mut lid = 0u16;
        let mut lmc = 0u8;
        if let Some(other) = it.next() {
            return Err(ParseError::new(
                line,
                format!("unexpected {} after the node id", describe(&other)),
            ));
        }
        if let Some(comment) = comment {
            let rest = comment_tokens(comment);
            let mut i = 0;
            if let Some(Token::Quoted(d)) = rest.first() {
                description = Some(d.to_string());
                i = 1;
            }
            let word = |k: usize| match rest.get(k) {
                Some(Token::Word(w)) => Some(*w),
                _ => None,
            };
            while i < rest.len() {
                match word(i) {
                    Some(kw @ ("enhanced" | "base")) => {
                        if word(i + 1) != Some("port") || word(i + 2) != Some("0") {
                            return Err(ParseError::new(line, format!("expected \"{kw} port 0\"")));
                        }
                        enhanced = kw == "enhanced";
                        i += 3;
                    }
                    Some(kw @ ("lid" | "lmc")) => {
                        let arg = word(i + 1).unwrap_or_default();
                        let n = parse_u64(arg).ok_or_else(|| {
                            ParseError::new(line, format!("{kw} \"{arg}\" is not a number"))
                        })?;
                        if kw == "lid" {
                            lid = u16::try_from(n).map_err(|_| {
                                ParseError::new(line, format!("lid {n} does not fit 16 bits"))
                            })?;
                        } else if n > 7 {
                            return Err(ParseError::new(line, format!("lmc {n} is above 7")));
                        } else {
                            lmc = n as u8;
                        }
                        i += 2;
                    }
                    // Anything else after '#' is comment text.
                    _ => i += 1,
                }
            }
        }

        let node_guid = match kind {
            NodeKind::Switch => {
                let g = self.next_switch_guid;
                self.next_switch_guid = g.wrapping_add(1);
                g
            }
            NodeKind::Ca => {
                let g = self.next_ca_guid;
                self.next_ca_guid = g
                    .checked_add(u64::from(num_ports) + 1)
                    .ok_or_else(|| ParseError::new(line, "CA GUID allocation runs past 2^64"))?;
                g
            }
        };
        let node = Node {
            kind,
            description: description.unwrap_or_else(|| id.clone()),
            id,
            num_ports,
            node_guid: Guid(node_guid),
            system_image_guid: Guid(self.sysimg_once.take().unwrap_or(node_guid)),
            vendor_id: self.vendor_once.take().unwrap_or(0),
            device_id: self.device_id,
            enhanced_port0: kind == NodeKind::Switch && enhanced,
            lid: if kind == NodeKind::Switch {
                Lid(lid)
            } else {
                Lid(0)
            },
            lmc: if kind == NodeKind::Switch { lmc } else { 0 },
        };
        let index = self
            .topology
            .add_node(node)
            .map_err(|e| ParseError::new(line, e.to_string()))?;
        self.header_lines.push(line);
        self.current = Some(index);
        Ok(())
    }

    fn port_line(&mut self, line: usize, t: &str) -> Result<(), ParseError> {
        let Some(node) = self.current else {
            return Err(ParseError::new(
                line,
                "port line outside a node record (a blank line or setting ended the record)",
            ));
        };
        let (code, comment) = split_comment(t);
        let tokens = tokenize(code).map_err(|e| ParseError::new(line, e))?;
        let mut it = tokens.into_iter().peekable();
        let port = match it.next() {
            Some(Token::Bracket(p)) => parse_port_number(p, line, "local port")?,
            _ => return Err(ParseError::new(line, "expected [<port>]")),
        };
        let num_ports = self.topology.nodes[node].num_ports;
        if port > num_ports {
            return Err(ParseError::new(
                line,
                format!(
                    "port {port} is beyond the {num_ports} ports of \"{}\"",
                    self.topology.nodes[node].id
                ),
            ));
        }
        if let Some(Token::Paren(_)) = it.peek() {
            it.next();
        }
        let remote_id = match it.next() {
            Some(Token::Quoted(r)) => r.to_string(),
            _ => {
                return Err(ParseError::new(
                    line,
                    "expected the quoted id of the remote node",
                ))
            }
        };
        let remote_port = match it.next() {
            Some(Token::Bracket(p)) => parse_port_number(p, line, "remote port")?,
            _ => {
                return Err(ParseError::new(
                    line,
                    "expected [<remote port>] after the remote node id",
                ))
            }
        };
        if let Some(Token::Paren(_)) = it.peek() {
            it.next();
        }
        let mut width = None;
        let mut speed = None;
        for token in it {
            match token {
                Token::Word(w) => {
                    let (k, v) = w.split_once('=').ok_or_else(|| {
                        ParseError::new(line, format!("unexpected \"{w}\" on a port line"))
                    })?;
                    let mask = parse_u64(v).and_then(|m| u8::try_from(m).ok());
                    let bad = || ParseError::new(line, format!("bad {k}= value \"{v}\""));
                    match k {
                        "w" => {
                            width = Some(mask.and_then(LinkWidth::widest_in_mask).ok_or_else(bad)?)
                        }
                        "s" => {
                            speed = Some(mask.and_then(LinkSpeed::fastest_in_mask).ok_or_else(bad)?)
                        }
                        "e" => {
                            let m = mask.ok_or_else(bad)?;
                            if m != 0 {
                                speed = Some(LinkSpeed::fastest_in_ext_mask(m).ok_or_else(bad)?);
                            }
                        }
                        _ => {
                            return Err(ParseError::new(
                                line,
                                format!("unknown port option \"{k}=\""),
                            ))
                        }
                    }
                }
                other => {
                    return Err(ParseError::new(
                        line,
                        format!("unexpected {} on a port line", describe(&other)),
                    ))
                }
            }
        }
        for token in comment.map(comment_tokens).unwrap_or_default() {
            if let Token::Word(w) = token {
                if looks_like_rate(w) {
                    let rate = LinkRate::parse(w).ok_or_else(|| {
                        ParseError::new(line, format!("unknown link rate \"{w}\""))
                    })?;
                    width.get_or_insert(rate.width);
                    speed.get_or_insert(rate.speed);
                }
            }
        }
        if let Some(first) = self.port_lines.get(&(node, port)) {
            return Err(ParseError::new(
                line,
                format!(
                    "port {port} of \"{}\" is already listed on line {}",
                    self.topology.nodes[node].id, first.line
                ),
            ));
        }
        self.port_order.push((node, port));
        self.port_lines.insert(
            (node, port),
            PortLine {
                line,
                node,
                port,
                remote_id,
                remote_port,
                width,
                speed,
                default_rate: self.default_rate,
            },
        );
        Ok(())
    }

    fn link_all(&mut self) -> Result<(), ParseError> {
        let order = std::mem::take(&mut self.port_order);
        for key in order {
            let Some(pl) = self.port_lines.get(&key) else {
                continue;
            };
            let node_id = self.topology.nodes[pl.node].id.clone();
            let here = Endpoint {
                node: pl.node,
                port: pl.port,
            };
            if self.topology.peer(here).is_some() {
                continue; // linked from the other end already
            }
            let Some(remote) = self.topology.node_index(&pl.remote_id) else {
                return Err(ParseError::new(
                    pl.line,
                    format!("unknown node \"{}\"", pl.remote_id),
                ));
            };
            let remote_node = &self.topology.nodes[remote];
            if pl.remote_port > remote_node.num_ports {
                return Err(ParseError::new(
                    pl.line,
                    format!(
                        "\"{}\" has {} ports, there is no port {}",
                        remote_node.id, remote_node.num_ports, pl.remote_port
                    ),
                ));
            }
            let there = Endpoint {
                node: remote,
                port: pl.remote_port,
            };
            if there == here {
                return Err(ParseError::new(
                    pl.line,
                    format!("port {} of \"{node_id}\" is cabled to itself", pl.port),
                ));
            }
            let Some(other) = self.port_lines.get(&(remote, pl.remote_port)) else {
                return Err(ParseError::new(
                    pl.line,
                    format!(
                        "\"{node_id}\" port {} is cabled to \"{}\" port {}, but \"{}\" lists no port {}",
                        pl.port, remote_node.id, pl.remote_port, remote_node.id, pl.remote_port
                    ),
                ));
            };
            if other.remote_id != node_id || other.remote_port != pl.port {
                return Err(ParseError::new(
                    pl.line,
                    format!(
                        "\"{node_id}\" port {} is cabled to \"{}\" port {}, but line {} says \"{}\" port {} is cabled to \"{}\" port {}",
                        pl.port,
                        remote_node.id,
                        pl.remote_port,
                        other.line,
                        remote_node.id,
                        pl.remote_port,
                        other.remote_id,
                        other.remote_port
                    ),
                ));
            }
            let width = merge(pl.width, other.width).map_err(|(x, y)| {
                ParseError::new(
                    pl.line,
                    format!(
                        "the two ends disagree on the link width: {x} here, {y} on line {}",
                        other.line
                    ),
                )
            })?;
            let speed = merge(pl.speed, other.speed).map_err(|(x, y)| {
                ParseError::new(
                    pl.line,
                    format!(
                        "the two ends disagree on the link speed: {x} here, {y} on line {}",
                        other.line
                    ),
                )
            })?;
            let rate = LinkRate {
                width: width.unwrap_or(pl.default_rate.width),
                speed: speed.unwrap_or(pl.default_rate.speed),
            };
            self.topology
                .connect(here, there, rate)
                .map_err(|e| ParseError::new(pl.line, e.to_string()))?;
        }
        Ok(())
    }
}

/// Agreement of two optional values: equal, or only one given.
fn merge<T: PartialEq + Copy>(a: Option<T>, b: Option<T>) -> Result<Option<T>, (T, T)> {
    match (a, b) {
        (Some(x), Some(y)) if x != y => Err((x, y)),
        (x, y) => Ok(x.or(y)),
    }
}

/// `<1|2|4|8|12>x<UPPERCASE...>`: a word meant as a link rate (so a typo is an error, while
/// other comment words are ignored).
pub(super) fn looks_like_rate(word: &str) -> bool {
    let Some((lanes, speed)) = word.split_once('x') else {
        return false;
    };
    matches!(lanes, "1" | "2" | "4" | "8" | "12")
        && speed.starts_with(|c: char| c.is_ascii_uppercase())
        && speed
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

fn describe(token: &Token<'_>) -> String {
    match token {
        Token::Word(w) => format!("\"{w}\""),
        Token::Quoted(q) => format!("quoted \"{q}\""),
        Token::Bracket(b) => format!("[{b}]"),
        Token::Paren(p) => format!("({p})"),
    }
}
