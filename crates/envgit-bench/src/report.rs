//! The result table (stdout) and its JSON form. A row never fails the run: goals are checked
//! and shown, nothing more.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Ms,
    Bytes,
}

/// A goal of snapshots.md §8 (or of the benchmark's brief).
#[derive(Clone, Copy, Debug)]
pub enum Goal {
    /// value ≤ x (in the row's unit)
    AtMost(f64),
    /// anchor ÷ value ≥ x
    FasterBy(f64),
    /// value ≤ x × anchor
    AnchorTimes(f64),
}

#[derive(Debug)]
pub struct Row {
    pub name: String,
    pub unit: Unit,
    pub value: Option<f64>,
    pub anchor: Option<f64>,
    pub anchor_name: Option<String>,
    pub goals: Vec<Goal>,
    pub note: Option<String>,
}

impl Row {
    pub fn new(name: impl Into<String>, unit: Unit, value: f64) -> Self {
        Self {
            name: name.into(),
            unit,
            value: value.is_finite().then_some(value),
            anchor: None,
            anchor_name: None,
            goals: Vec::new(),
            note: None,
        }
    }

    pub fn ms(name: impl Into<String>, value: f64) -> Self {
        Self::new(name, Unit::Ms, value)
    }

    pub fn bytes(name: impl Into<String>, value: f64) -> Self {
        Self::new(name, Unit::Bytes, value)
    }

    pub fn anchor(mut self, name: impl Into<String>, value: f64) -> Self {
        self.anchor_name = Some(name.into());
        self.anchor = value.is_finite().then_some(value);
        self
    }

    pub fn goal(mut self, g: Goal) -> Self {
        self.goals.push(g);
        self
    }

    pub fn note(mut self, n: impl Into<String>) -> Self {
        self.note = Some(n.into());
        self
    }

    /// anchor ÷ envgit: how many times faster (or smaller) envgit is.
    pub fn ratio(&self) -> Option<f64> {
        match (self.value, self.anchor) {
            (Some(v), Some(a)) if v > 0.0 => Some(a / v),
            _ => None,
        }
    }

    /// `None` when there is no goal or it cannot be judged (no value or no anchor).
    pub fn met(&self) -> Option<bool> {
        if self.goals.is_empty() {
            return None;
        }
        let v = self.value?;
        let mut all = true;
        for g in &self.goals {
            all &= match g {
                Goal::AtMost(x) => v <= *x,
                Goal::FasterBy(x) => self.ratio()? >= *x,
                Goal::AnchorTimes(x) => v <= x * self.anchor?,
            };
        }
        Some(all)
    }

    fn goal_text(&self) -> String {
        let parts: Vec<String> = self
            .goals
            .iter()
            .map(|g| match g {
                Goal::AtMost(x) => format!("≤ {}", fmt_value(self.unit, *x)),
                Goal::FasterBy(x) if *x == 1.0 => "no slower".into(),
                Goal::FasterBy(x) => format!("≥ {x}× faster"),
                Goal::AnchorTimes(x) => format!("≤ {x}× anchor"),
            })
            .collect();
        if parts.is_empty() {
            "—".into()
        } else {
            parts.join(", ")
        }
    }
}

pub fn fmt_value(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Ms if v >= 10_000.0 => format!("{:.1} s", v / 1e3),
        Unit::Ms if v >= 1_000.0 => format!("{:.2} s", v / 1e3),
        Unit::Ms if v >= 100.0 => format!("{v:.0} ms"),
        Unit::Ms if v >= 10.0 => format!("{v:.1} ms"),
        Unit::Ms => format!("{v:.2} ms"),
        Unit::Bytes if v >= 1024.0 * 1024.0 => format!("{:.1} MiB", v / 1024.0 / 1024.0),
        Unit::Bytes if v >= 1024.0 => format!("{:.1} KiB", v / 1024.0),
        Unit::Bytes => format!("{v:.0} B"),
    }
}

#[derive(Default)]
pub struct Report {
    pub rows: Vec<Row>,
    /// Facts about the run (tree, machine, caveats), printed under the table.
    pub notes: Vec<String>,
    pub config: serde_json::Value,
}

#[derive(Serialize)]
struct JsonRow<'a> {
    name: &'a str,
    unit: Unit,
    value: Option<f64>,
    anchor_name: Option<&'a str>,
    anchor: Option<f64>,
    ratio: Option<f64>,
    goal: String,
    met: Option<bool>,
    note: Option<&'a str>,
}

impl Report {
    pub fn push(&mut self, row: Row) {
        crate::util::progress(&format!(
            "  {}: {}",
            row.name,
            row.value
                .map(|v| fmt_value(row.unit, v))
                .unwrap_or_else(|| "—".into())
        ));
        self.rows.push(row);
    }

    pub fn note(&mut self, n: impl Into<String>) {
        let n = n.into();
        crate::util::progress(&format!("  note: {n}"));
        self.notes.push(n);
    }

    pub fn table(&self) -> String {
        let head = ["figure", "envgit", "anchor", "ratio", "goal", "met"];
        let cells: Vec<[String; 6]> = self
            .rows
            .iter()
            .map(|r| {
                let anchor = match (&r.anchor_name, r.anchor) {
                    (Some(n), Some(a)) => format!("{} ({n})", fmt_value(r.unit, a)),
                    (Some(n), None) => format!("— ({n})"),
                    _ => "—".into(),
                };
                [
                    r.name.clone(),
                    r.value
                        .map(|v| fmt_value(r.unit, v))
                        .unwrap_or_else(|| "—".into()),
                    anchor,
                    r.ratio()
                        .map(|x| format!("{x:.1}×"))
                        .unwrap_or_else(|| "—".into()),
                    r.goal_text(),
                    match r.met() {
                        Some(true) => "yes".into(),
                        Some(false) => "NO".into(),
                        None => "—".into(),
                    },
                ]
            })
            .collect();
        let mut width = head.map(|h| h.chars().count());
        for row in &cells {
            for (w, c) in width.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cols: &[String]| -> String {
            let mut s = String::new();
            for (i, (c, w)) in cols.iter().zip(width).enumerate() {
                if i > 0 {
                    s.push_str("  ");
                }
                s.push_str(c);
                if i + 1 < cols.len() {
                    s.push_str(&" ".repeat(w - c.chars().count()));
                }
            }
            s.push('\n');
            s
        };
        let mut out = line(&head.map(String::from));
        out.push_str(&line(&width.map(|w| "-".repeat(w))));
        for row in &cells {
            out.push_str(&line(row));
        }
        out.push_str("\nratio = anchor ÷ envgit (above 1: envgit is faster or smaller)\n");
        let row_notes: Vec<String> = self
            .rows
            .iter()
            .filter_map(|r| r.note.as_ref().map(|n| format!("- {}: {n}", r.name)))
            .collect();
        if !row_notes.is_empty() || !self.notes.is_empty() {
            out.push_str("\nnotes:\n");
            for n in &self.notes {
                out.push_str(&format!("- {n}\n"));
            }
            for n in row_notes {
                out.push_str(&n);
                out.push('\n');
            }
        }
        out
    }

    pub fn json(&self) -> serde_json::Value {
        let rows: Vec<JsonRow<'_>> = self
            .rows
            .iter()
            .map(|r| JsonRow {
                name: &r.name,
                unit: r.unit,
                value: r.value,
                anchor_name: r.anchor_name.as_deref(),
                anchor: r.anchor,
                ratio: r.ratio(),
                goal: r.goal_text(),
                met: r.met(),
                note: r.note.as_deref(),
            })
            .collect();
        serde_json::json!({
            "config": self.config,
            "rows": rows,
            "notes": self.notes,
        })
    }
}
