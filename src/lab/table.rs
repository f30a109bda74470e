//! Tables that paste: a grid of text cells rendered as aligned text (split into blocks of at
//! most [`MAIL_WIDTH`] characters where asked), markdown or CSV (`--format`). Pure.

use crate::error::{Error, Result};

/// The widest line a mail takes without wrapping (RFC 5322's recommendation is 78; 72 leaves
/// room for a quote's `> `).
pub const MAIL_WIDTH: usize = 72;

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
pub struct Grid {
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
    pub fn width(&self) -> usize {
        let w = self.widths();
        w.iter().sum::<usize>() + 2 * w.len().saturating_sub(1)
    }

    /// Aligned columns two spaces apart, one line per row, no trailing blanks.
    pub fn text(&self) -> String {
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
    pub fn markdown(&self) -> String {
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
    pub fn csv(&self) -> Result<String> {
        let fail = |e: String| Error::Failure(format!("csv: {e}"));
        let mut w = csv::Writer::from_writer(Vec::new());
        for r in std::iter::once(&self.header).chain(&self.rows) {
            w.write_record(r).map_err(|e| fail(e.to_string()))?;
        }
        let bytes = w.into_inner().map_err(|e| fail(e.to_string()))?;
        String::from_utf8(bytes).map_err(|e| fail(e.to_string()))
    }

    /// Columns `cols` (indices) of this grid.
    pub fn select(&self, cols: &[usize]) -> Grid {
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
    pub fn blocks(&self, keep: usize, width: usize) -> Vec<Grid> {
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
    pub fn render(&self, format: Format) -> Result<String> {
        match format {
            Format::Text => Ok(self.text()),
            Format::Markdown => Ok(self.markdown()),
            Format::Csv => self.csv(),
        }
    }
}

/// `blocks` rendered in `format`, one after the other, a blank line between them.
///
/// Errors: as [`Grid::csv`].
pub fn render_blocks(blocks: &[Grid], format: Format) -> Result<String> {
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
}
