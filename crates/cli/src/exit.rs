//! Exit codes and error rendering shared by every tool.

use std::io;
use std::process::ExitCode;

/// `println!` that returns the write's error instead of panicking: a listing stops at a
/// closed stdout (`softib fabric status | head`), and [`finish`] makes that a quiet exit.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($t)*)
    }};
}

/// `println!` for what an action reports about itself: a closed stdout loses the line but does
/// not stop the action half done (`softib fabric up` still starts its SM).
macro_rules! note {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// [`note!`] without the newline.
macro_rules! note_part {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

/// The tool ran and found nothing wrong.
pub const OK: u8 = 0;
/// The tool ran but what it examined has problems (e.g. malformed packets in a capture).
pub const FOUND_PROBLEMS: u8 = 1;
/// The tool could not do its job: bad arguments, unreadable input, I/O failure.
pub const FAILED: u8 = 2;

/// Turns a tool's result into the process exit code, printing an error to stderr. A closed
/// pipe (`softib pcap decode x.pcap | head`) is not an error.
pub fn finish(result: anyhow::Result<u8>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if e.chain().any(|c| {
                c.downcast_ref::<io::Error>()
                    .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::from(OK);
            }
            eprintln!("softib: {e:#}");
            ExitCode::from(FAILED)
        }
    }
}
