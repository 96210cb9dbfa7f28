//! Aligned text tables: numeric columns (every cell a number, a percentage or `-`)
//! right-aligned, the others left-aligned.

/// A table being filled.
#[derive(Debug, Clone, Default)]
pub struct TextTable {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl TextTable {
    /// A table with these column headers.
    pub fn new<S: ToString>(head: impl IntoIterator<Item = S>) -> TextTable {
        TextTable {
            head: head.into_iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are blank).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, two spaces between columns, a newline after each row.
    pub fn render(&self) -> String {
        let ncol = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.head.len()])
            .max()
            .unwrap_or(0);
        let mut width = vec![0usize; ncol];
        for r in std::iter::once(&self.head).chain(&self.rows) {
            for (w, c) in width.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let numeric: Vec<bool> = (0..ncol)
            .map(|i| {
                i > 0
                    && self.rows.iter().all(|r| {
                        r.get(i).is_none_or(|c| {
                            c.chars()
                                .all(|ch| ch.is_ascii_digit() || ".%-/ ".contains(ch))
                        })
                    })
            })
            .collect();
        let mut out = String::new();
        for r in std::iter::once(&self.head).chain(&self.rows) {
            let mut line = String::new();
            for (i, w) in width.iter().enumerate() {
                let c = r.get(i).map_or("", String::as_str);
                let pad = w.saturating_sub(c.chars().count());
                if i > 0 {
                    line += "  ";
                }
                if !numeric.get(i).copied().unwrap_or(false) {
                    line += c;
                    line += &" ".repeat(pad);
                } else {
                    line += &" ".repeat(pad);
                    line += c;
                }
            }
            out += line.trim_end();
            out.push('\n');
        }
        out
    }
}

/// `n / d` as a share (0..1), 0 when `d` is 0.
pub fn share(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 / d as f64
    }
}

/// A share (0..1) as a percentage with one decimal, `-` for 0 requests handled by callers.
pub fn pct(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns() {
        let mut t = TextTable::new(["class", "n"]);
        t.row(vec!["human".into(), "1234".into()]);
        t.row(vec!["script".into(), "5".into()]);
        assert_eq!(t.render(), "class      n\nhuman   1234\nscript     5\n");
        assert_eq!(pct(0.9321), "93.2%");
    }
}
