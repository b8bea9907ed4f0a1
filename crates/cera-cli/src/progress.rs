//! Byte progress on stderr: a real progress bar (indicatif: bytes, rate, time left) on a
//! terminal; in a log (not a terminal) a few plain lines, one per quarter, never a `\r` per
//! percent.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

use crate::common::human_bytes;

pub struct ByteProgress {
    tty: bool,
    bar: Option<ProgressBar>,
    label: String,
    total: u64,
    last_quarter: Option<u64>,
}

impl ByteProgress {
    pub fn new() -> ByteProgress {
        ByteProgress {
            tty: std::io::stderr().is_terminal(),
            bar: None,
            label: String::new(),
            total: 0,
            last_quarter: None,
        }
    }

    /// Starts a transfer of `total` bytes, `done` of them already there.
    pub fn start(&mut self, label: &str, total: u64, done: u64) {
        self.finish();
        self.label = label.to_owned();
        self.total = total;
        self.last_quarter = None;
        if self.tty {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template(
                    "cera: {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar.set_message(label.to_owned());
            bar.set_position(done);
            self.bar = Some(bar);
        } else {
            self.update(done);
        }
    }

    pub fn update(&mut self, done: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            return;
        }
        if self.tty {
            return;
        }
        let quarter = done * 4 / self.total.max(1);
        if self.last_quarter != Some(quarter) {
            self.last_quarter = Some(quarter);
            eprintln!(
                "cera: {} {:3}% ({} / {})",
                self.label,
                quarter * 25,
                human_bytes(done),
                human_bytes(self.total)
            );
        }
    }

    /// Prints a line without breaking the bar.
    pub fn line(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(format!("cera: {text}")),
            None => eprintln!("cera: {text}"),
        }
    }

    /// No transfer is being shown.
    pub fn is_idle(&self) -> bool {
        self.bar.is_none() && self.last_quarter.is_none()
    }

    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish();
        }
        self.last_quarter = None;
    }
}

impl Drop for ByteProgress {
    fn drop(&mut self) {
        self.finish();
    }
}
