//! `idem run --ops FILE`: the operations file as an [`OperationSource`],
//! read line by line, never whole. The runner reads it twice (to check
//! every line, then to run them), so the file is opened once and read
//! again through the same handle: a file replaced by a new one in between
//! is not read half old, half new. Standard input, a pipe or anything else
//! that cannot be read twice is first copied to an unnamed temporary file.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use idem::job::{OperationSource, SourceItem, SourceRead, Unreadable};
use idem_core::{Operation, OperationLimits};

use crate::exit::Failure;
use crate::run_flags::RunFlags;

/// An operations file: one JSON object a line; blank lines are skipped.
pub struct OpsFile {
    file: File,
    limits: OperationLimits,
    run: Arc<RunFlags>,
}

impl OpsFile {
    /// Opens `path` (`-`: standard input). Each operation is parsed within
    /// `limits`, and `run`'s `--run-id`/`--trigger`/`--attempt` applied.
    pub fn open(path: &Path, limits: OperationLimits, run: RunFlags) -> Result<OpsFile, Failure> {
        let cannot =
            |e: std::io::Error| Failure::input(format!("cannot read {}: {e}", path.display()));
        let file = if path.as_os_str() == "-" {
            spool(&mut std::io::stdin().lock()).map_err(cannot)?
        } else {
            let mut file = File::open(path).map_err(cannot)?;
            let meta = file.metadata().map_err(cannot)?;
            if meta.is_dir() {
                return Err(Failure::input(format!("{} is a directory", path.display())));
            }
            if meta.is_file() {
                file
            } else {
                spool(&mut file).map_err(cannot)?
            }
        };
        Ok(OpsFile {
            file,
            limits,
            run: Arc::new(run),
        })
    }
}

/// Copies `input` to an unnamed temporary file, to be read twice.
fn spool(input: &mut impl Read) -> std::io::Result<File> {
    let mut file = tempfile::tempfile()?;
    std::io::copy(input, &mut file)?;
    Ok(file)
}

impl OperationSource for OpsFile {
    fn read(&self) -> Result<SourceRead, String> {
        let mut file = self.file.try_clone().map_err(|e| e.to_string())?;
        file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
        let limits = self.limits;
        let run = self.run.clone();
        let mut lines = Lines {
            reader: BufReader::with_capacity(64 * 1024, file),
            max: limits.max_bytes,
            number: 0,
            buf: Vec::new(),
        };
        Ok(Box::new(std::iter::from_fn(move || {
            let (number, line) = lines.next()?;
            let operation = match line {
                Ok(bytes) => parse(bytes, &limits, &run),
                Err(error) => Err(error),
            };
            Some(SourceItem {
                position: number,
                operation,
            })
        })))
    }
}

/// One line as an operation.
fn parse(bytes: &[u8], limits: &OperationLimits, run: &RunFlags) -> Result<Operation, Unreadable> {
    match Operation::from_slice(bytes, limits) {
        Ok(mut op) => {
            run.apply(&mut op);
            Ok(op)
        }
        Err(e) => Err(Unreadable {
            error: e.to_string(),
            text: String::from_utf8_lossy(bytes).into_owned(),
        }),
    }
}

/// The non-blank lines of a file with their numbers (from 1), each read
/// into one reused buffer and never longer than the operation limit: a
/// longer line is an error, and is skipped over without being held.
struct Lines {
    reader: BufReader<File>,
    max: usize,
    number: u64,
    buf: Vec<u8>,
}

impl Lines {
    fn next(&mut self) -> Option<(u64, Result<&[u8], Unreadable>)> {
        loop {
            self.number += 1;
            self.buf.clear();
            let mut too_long = false;
            let mut any = false;
            loop {
                let chunk = match self.reader.fill_buf() {
                    Ok(chunk) => chunk,
                    Err(e) => {
                        return Some((
                            self.number,
                            Err(Unreadable {
                                error: format!("cannot read: {e}"),
                                text: String::new(),
                            }),
                        ));
                    }
                };
                if chunk.is_empty() {
                    break;
                }
                any = true;
                let (taken, ended) = match chunk.iter().position(|&b| b == b'\n') {
                    Some(i) => (i + 1, true),
                    None => (chunk.len(), false),
                };
                let content = &chunk[..if ended { taken - 1 } else { taken }];
                if !too_long {
                    if self.buf.len() + content.len() > self.max {
                        too_long = true;
                        // Keep the start, for the report.
                        let room = 200usize.saturating_sub(self.buf.len());
                        self.buf
                            .extend_from_slice(&content[..room.min(content.len())]);
                    } else {
                        self.buf.extend_from_slice(content);
                    }
                }
                self.reader.consume(taken);
                if ended {
                    break;
                }
            }
            if !any {
                return None;
            }
            if too_long {
                let mut start = String::from_utf8_lossy(&self.buf).into_owned();
                start.push('…');
                return Some((
                    self.number,
                    Err(Unreadable {
                        error: format!("the line is longer than the limit of {} bytes", self.max),
                        text: start,
                    }),
                ));
            }
            if self.buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
            return Some((self.number, Ok(&self.buf)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn read_all(text: &[u8], max: usize) -> Vec<(u64, Result<String, String>)> {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(text).unwrap();
        file.seek(SeekFrom::Start(0)).unwrap();
        let mut lines = Lines {
            reader: BufReader::with_capacity(16, file),
            max,
            number: 0,
            buf: Vec::new(),
        };
        let mut out = Vec::new();
        while let Some((n, line)) = lines.next() {
            out.push((
                n,
                line.map(|b| String::from_utf8_lossy(b).into_owned())
                    .map_err(|e| e.error),
            ));
        }
        out
    }

    #[test]
    fn lines_are_numbered_blank_ones_skipped_and_long_ones_refused() {
        let long = "x".repeat(100);
        let text = format!("a\n\n  \nbb\r\n{long}\nc");
        let got = read_all(text.as_bytes(), 50);
        assert_eq!(got[0], (1, Ok("a".into())));
        assert_eq!(got[1], (4, Ok("bb".into())));
        assert_eq!(got[2].0, 5);
        assert!(
            got[2]
                .1
                .as_ref()
                .unwrap_err()
                .contains("longer than the limit of 50")
        );
        assert_eq!(got[3], (6, Ok("c".into())));
        assert_eq!(got.len(), 4);
    }
}
