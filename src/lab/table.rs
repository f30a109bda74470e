//! Tables that paste: a grid of text cells rendered as aligned text (split into blocks of at
//! most [`MAIL_WIDTH`] characters where asked), markdown or CSV (`--format`). Pure.

use crate::error::{Error, Result};

/// The widest line a mail takes without wrapping (RFC 5322's recommendation is 78; 72 leaves
/// room for a quote's `> `).
pub(crate) const MAIL_WIDTH: usize = 72;

/// How the sweep's table and the comparison print (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// Aligned columns, two spaces apart; the default table in blocks of at most
    /// [`MAIL_WIDTH`] characters.
    #[default]
    Text,
    /// A markdown (GitHub) table.
    Markdown,
    /// CSV, a header row first.
    Csv,
}

impl Format {
    /// `text`, `markdown` or `csv`.
    pub fn parse(text: &str) -> Option<Format> {
        match text {
            "text" => Some(Format::Text),
            "markdown" | "md" => Some(Format::Markdown),
            "csv" => Some(Format::Csv),
            _ => None,
        }
    }
}

/// A table of text cells: a header row and rows of the same length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grid {
    /// The header.
    pub header: Vec<String>,
    /// The rows.
    pub rows: Vec<Vec<String>>,
}

impl Grid {
    fn widths(&self) -> Vec<usize> {
        (0..self.header.len())
            .map(|i| {
                std::iter::once(&self.header)
                    .chain(&self.rows)
                    .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    }

    /// The width of the widest line of [`Grid::text`].
    pub(crate) fn width(&self) -> usize {
        let w = self.widths();
        w.iter().sum::<usize>() + 2 * w.len().saturating_sub(1)
    }

    /// Aligned columns two spaces apart, one line per row, no trailing blanks.
    pub(crate) fn text(&self) -> String {
        let widths = self.widths();
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let line: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
        }
        out
    }

    /// A markdown table (`|` in a cell escaped).
    pub(crate) fn markdown(&self) -> String {
        let row = |cells: &[String]| {
            let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
            format!("| {} |\n", cells.join(" | "))
        };
        let mut out = row(&self.header);
        out.push_str(&format!(
            "|{}\n",
            self.header.iter().map(|_| "---|").collect::<String>()
        ));
        for r in &self.rows {
            out.push_str(&row(r));
        }
        out
    }

    /// CSV, the header row first.
    ///
    /// Errors: the CSV writer's (only from its buffer, which cannot fail).
    pub(crate) fn csv(&self) -> Result<String> {
        let fail = |e: String| Error::Failure(format!("csv: {e}"));
        let mut w = csv::Writer::from_writer(Vec::new());
        for r in std::iter::once(&self.header).chain(&self.rows) {
            w.write_record(r).map_err(|e| fail(e.to_string()))?;
        }
        let bytes = w.into_inner().map_err(|e| fail(e.to_string()))?;
        String::from_utf8(bytes).map_err(|e| fail(e.to_string()))
    }

    /// Columns `cols` (indices) of this grid.
    pub(crate) fn select(&self, cols: &[usize]) -> Grid {
        let pick = |r: &Vec<String>| {
            cols.iter()
                .map(|&i| r.get(i).cloned().unwrap_or_default())
                .collect()
        };
        Grid {
            header: pick(&self.header),
            rows: self.rows.iter().map(pick).collect(),
        }
    }

    /// This grid's columns after the first `keep` ones, split into blocks that each repeat
    /// the first `keep` columns and are at most `width` characters wide (a column wider than
    /// that on its own gets a block of its own).
    pub(crate) fn blocks(&self, keep: usize, width: usize) -> Vec<Grid> {
        let widths = self.widths();
        let head: usize = widths[..keep.min(widths.len())].iter().map(|w| w + 2).sum();
        let mut blocks: Vec<Vec<usize>> = Vec::new();
        let mut used = head;
        for (i, w) in widths.iter().enumerate().skip(keep) {
            let w = w + 2;
            match blocks.last_mut() {
                Some(b) if used + w - 2 <= width => {
                    b.push(i);
                    used += w;
                }
                _ => {
                    blocks.push(vec![i]);
                    used = head + w;
                }
            }
        }
        blocks
            .into_iter()
            .map(|b| {
                let cols: Vec<usize> = (0..keep).chain(b).collect();
                self.select(&cols)
            })
            .collect()
    }

    /// This grid in `format`.
    ///
    /// Errors: as [`Grid::csv`].
    pub(crate) fn render(&self, format: Format) -> Result<String> {
        match format {
            Format::Text => Ok(self.text()),
            Format::Markdown => Ok(self.markdown()),
            Format::Csv => self.csv(),
        }
    }
}

/// `units` (pieces that are never split: words, or a command's quoted arguments) joined by
/// single spaces into lines of at most `width` characters, greedily: the first line starts
/// with `first`, every later one with `indent`, and every line but the last ends with `end`
/// (counted in the width: ` \` continues a shell command). A unit too wide for a line of its
/// own gets a line of its own, whole: nothing is cut or dropped. Every line ends in `\n`;
/// no units: `first` alone.
pub(crate) fn wrap_units<S: AsRef<str>>(
    first: &str,
    units: &[S],
    indent: &str,
    end: &str,
    width: usize,
) -> String {
    let len = |s: &str| s.chars().count();
    let mut out = String::new();
    let mut line = first.to_string();
    let mut empty = true;
    for u in units {
        let u = u.as_ref();
        if empty {
            line.push_str(u);
            empty = false;
        } else if len(&line) + 1 + len(u) + len(end) <= width {
            line.push(' ');
            line.push_str(u);
        } else {
            out.push_str(&line);
            out.push_str(end);
            out.push('\n');
            line = format!("{indent}{u}");
        }
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

/// One line of prose wrapped at [`MAIL_WIDTH`] between its words (single spaces), the
/// continuation lines indented by two spaces ([`wrap_units`]).
pub(crate) fn wrap(line: &str) -> String {
    let words: Vec<&str> = line.split(' ').filter(|w| !w.is_empty()).collect();
    wrap_units("", &words, "  ", "", MAIL_WIDTH)
}

/// `blocks` rendered in `format`, one after the other, a blank line between them.
///
/// Errors: as [`Grid::csv`].
pub(crate) fn render_blocks(blocks: &[Grid], format: Format) -> Result<String> {
    let mut parts = Vec::new();
    for b in blocks {
        parts.push(b.render(format)?);
    }
    Ok(parts.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid() -> Grid {
        Grid {
            header: ["k", "alpha", "beta", "gamma"].map(String::from).to_vec(),
            rows: vec![
                ["4K", "1.00 +/- 0.10", "22", "x|y"]
                    .map(String::from)
                    .to_vec(),
                ["64K", "2.00 +/- -", "3", "z"].map(String::from).to_vec(),
            ],
        }
    }

    /// The three formats of one grid, golden.
    #[test]
    fn the_formats_are_golden() {
        let g = grid();
        assert_eq!(
            g.text(),
            "k    alpha          beta  gamma\n4K   1.00 +/- 0.10  22    x|y\n64K  2.00 +/- -     3     z\n"
        );
        assert_eq!(
            g.markdown(),
            "| k | alpha | beta | gamma |\n|---|---|---|---|\n| 4K | 1.00 +/- 0.10 | 22 | x\\|y |\n| 64K | 2.00 +/- - | 3 | z |\n"
        );
        assert_eq!(
            g.csv().unwrap(),
            "k,alpha,beta,gamma\n4K,1.00 +/- 0.10,22,x|y\n64K,2.00 +/- -,3,z\n"
        );
        assert_eq!(Format::parse("md"), Some(Format::Markdown));
        assert_eq!(Format::parse("html"), None);
    }

    /// Blocks keep the key column and fit the width; a column too wide alone gets its own.
    #[test]
    fn blocks_fit_the_width_and_keep_the_key() {
        let g = grid();
        let b = g.blocks(1, 22);
        let headers: Vec<Vec<String>> = b.iter().map(|g| g.header.clone()).collect();
        assert_eq!(
            headers,
            vec![
                vec!["k".to_string(), "alpha".into()],
                vec!["k".to_string(), "beta".into(), "gamma".into()]
            ]
        );
        for block in &b {
            assert!(block.width() <= 22, "{}", block.text());
        }
        let narrow = g.blocks(1, 5);
        assert_eq!(narrow.len(), 3, "one block per column when none fits");
        assert_eq!(
            render_blocks(&b, Format::Text)
                .unwrap()
                .matches("\n\n")
                .count(),
            1
        );
    }

    /// Wrapping keeps every unit whole and in order, fits the width, indents the
    /// continuation lines and ends each but the last with `end`; a unit wider than a line
    /// gets one of its own.
    #[test]
    fn wrapping_keeps_every_unit_and_fits_the_width() {
        let units = [
            "ncdevmem-rs",
            "-l",
            "--pre-run",
            "'perf record -a'",
            "--runs",
            "3",
        ];
        assert_eq!(
            wrap_units("command: ", &units, "    ", " \\", 34),
            "command: ncdevmem-rs -l \\\n    --pre-run 'perf record -a' \\\n    --runs 3\n"
        );
        assert_eq!(wrap_units("x: ", &[] as &[&str], "  ", "", 10), "x:\n");
        let long = "a".repeat(20);
        assert_eq!(
            wrap_units("", &["b", &long, "c"], "  ", "", 10),
            format!("b\n  {long}\n  c\n")
        );
        let line =
            "env: ncdevmem-rs 0.1.0 (commit d956a01c28b7, target x86_64-unknown-linux-gnu), \
                    host vm, kernel 6.18.44-fc-v1272, AMD EPYC, CPUs 0-1";
        let w = wrap(line);
        assert_eq!(
            w,
            "env: ncdevmem-rs 0.1.0 (commit d956a01c28b7, target\n  \
             x86_64-unknown-linux-gnu), host vm, kernel 6.18.44-fc-v1272, AMD EPYC,\n  \
             CPUs 0-1\n"
        );
        assert!(w.lines().all(|l| l.chars().count() <= MAIL_WIDTH), "{w}");
        let joined: Vec<&str> = w.split_whitespace().collect();
        assert_eq!(joined, line.split_whitespace().collect::<Vec<_>>());
    }
}
