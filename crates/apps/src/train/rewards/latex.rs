//! mathruler's `_parse_latex`: pylatexenc 2.11's `LatexNodes2Text().latex_to_text` on the answer
//! (after `\tfrac`/`\dfrac` → `\frac` and a space before every `\frac`), then `√ π ∞ ∪ · ×` →
//! `sqrt pi inf U * *`, stripped.
//!
//! Only a subset of pylatexenc is rendered, the one answers use; anything else returns `None`
//! and the answer is graded incorrect (documented in `grade`):
//!
//! * groups `{…}` render their content (`{a}{b}` → `ab`);
//! * `\frac` with two arguments (each a group or a single character, whitespace before them
//!   skipped) → `A/B` without parentheses (`\frac{a+b}{c}` → `a+b/c`, as pylatexenc does);
//!   `\sqrt` with one → `√(A)`, an optional index `[n]` dropped (`\sqrt[3]{8}` → `√(8)`);
//! * `\text \textrm \textit \textbf \textnormal \mbox \mathrm \mathit \emph \operatorname
//!   \boxed` render their argument; `\displaystyle \left \right \degree` render nothing;
//! * symbols: `\pi π`, `\infty ∞`, `\cdot ·`, `\times ×`, `\cup ∪`, `\cap ∩`, `\circ ∘`, `\pm ±`,
//!   `\le(q) ≤`, `\ge(q) ≥`, `\ne(q) ≠`, `\in ∈`, `\dots`/`\ldots …`, `\cdots ⋯`, `\alpha \beta \gamma \delta \theta
//!   \lambda \mu \sigma \omega`;
//! * `\, \; \: \ ` → a space, `\!` → nothing, `\{ \} \$ \% \& \# \_` → the character, `~` →
//!   U+00A0;
//! * a letter macro swallows the whitespace after it (TeX's rule); other characters pass through.

/// What pylatexenc renders a symbol macro as.
fn symbol(name: &str) -> Option<&'static str> {
    Some(match name {
        "pi" => "π",
        "infty" => "∞",
        "cdot" => "·",
        "times" => "×",
        "cup" => "∪",
        "cap" => "∩",
        "circ" => "∘",
        "pm" => "±",
        "le" | "leq" => "≤",
        "ge" | "geq" => "≥",
        "ne" | "neq" => "≠",
        "in" => "∈",
        "dots" | "ldots" => "…",
        "cdots" => "⋯",
        "alpha" => "α",
        "beta" => "β",
        "gamma" => "γ",
        "delta" => "δ",
        "theta" => "θ",
        "lambda" => "λ",
        "mu" => "μ",
        "sigma" => "σ",
        "omega" => "ω",
        "displaystyle" | "left" | "right" | "degree" => "",
        _ => return None,
    })
}

fn is_text_macro(name: &str) -> bool {
    matches!(
        name,
        "text"
            | "textrm"
            | "textit"
            | "textbf"
            | "textnormal"
            | "mbox"
            | "mathrm"
            | "mathit"
            | "emph"
            | "operatorname"
            | "boxed"
    )
}

/// Deepest group nesting rendered (pylatexenc itself recurses; answers never nest this deep).
const MAX_NESTING: usize = 100;

struct Renderer {
    c: Vec<char>,
    i: usize,
    depth: usize,
}

impl Renderer {
    fn skip_ws(&mut self) {
        while self.c.get(self.i).is_some_and(|c| *c == ' ') {
            self.i += 1;
        }
    }

    /// One macro argument: a group or a single plain character.
    fn arg(&mut self) -> Option<String> {
        self.skip_ws();
        match self.c.get(self.i).copied()? {
            '{' => {
                self.i += 1;
                self.group()
            }
            '}' | '\\' | '[' => None,
            ch => {
                self.i += 1;
                Some(ch.to_string())
            }
        }
    }

    /// Skips an optional argument `[…]` (the `[` at the cursor), braces balanced inside.
    fn optional(&mut self) -> Option<()> {
        self.i += 1;
        let mut depth = 0usize;
        loop {
            match self.c.get(self.i).copied()? {
                ']' if depth == 0 => {
                    self.i += 1;
                    return Some(());
                }
                '{' => depth += 1,
                '}' => depth = depth.checked_sub(1)?,
                _ => {}
            }
            self.i += 1;
        }
    }

    /// The rest of a group whose `{` was just read.
    fn group(&mut self) -> Option<String> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return None;
        }
        let s = self.nodes(true);
        self.depth -= 1;
        s
    }

    /// Renders until the end, or until the closing brace of a group when `in_group`.
    fn nodes(&mut self, in_group: bool) -> Option<String> {
        let mut out = String::new();
        while let Some(&ch) = self.c.get(self.i) {
            match ch {
                '}' => {
                    if !in_group {
                        return None;
                    }
                    self.i += 1;
                    return Some(out);
                }
                '{' => {
                    self.i += 1;
                    out.push_str(&self.group()?);
                }
                '~' => {
                    self.i += 1;
                    out.push('\u{a0}');
                }
                '\\' => {
                    self.i += 1;
                    let next = *self.c.get(self.i)?;
                    if next.is_ascii_alphabetic() {
                        let start = self.i;
                        while self.c.get(self.i).is_some_and(|c| c.is_ascii_alphabetic()) {
                            self.i += 1;
                        }
                        let name: String = self.c[start..self.i].iter().collect();
                        if name == "frac" {
                            let a = self.arg()?;
                            let b = self.arg()?;
                            out.push_str(&format!("{a}/{b}"));
                        } else if name == "sqrt" {
                            // The optional index is parsed and not rendered: `\sqrt[3]{8}`
                            // → `√(8)`, as pylatexenc does.
                            self.skip_ws();
                            if self.c.get(self.i) == Some(&'[') {
                                self.optional()?;
                            }
                            let a = self.arg()?;
                            out.push_str(&format!("√({a})"));
                        } else if is_text_macro(&name) {
                            let a = self.arg()?;
                            out.push_str(&a);
                        } else {
                            let s = symbol(&name)?;
                            self.skip_ws();
                            out.push_str(s);
                        }
                    } else {
                        self.i += 1;
                        match next {
                            ',' | ';' | ':' | ' ' => out.push(' '),
                            '!' => {}
                            '{' | '}' | '$' | '%' | '&' | '#' | '_' => out.push(next),
                            _ => return None,
                        }
                    }
                }
                '\n' | '\t' | '\r' | '%' | '$' => return None,
                _ => {
                    self.i += 1;
                    out.push(ch);
                }
            }
        }
        if in_group {
            None
        } else {
            Some(out)
        }
    }
}

/// `mathruler.grader._parse_latex(expr)`, or `None` outside the rendered subset.
pub fn parse_latex(expr: &str) -> Option<String> {
    let e = expr
        .replace("\\tfrac", "\\frac")
        .replace("\\dfrac", "\\frac")
        .replace("\\frac", " \\frac");
    let mut r = Renderer {
        c: e.chars().collect(),
        i: 0,
        depth: 0,
    };
    let text = r.nodes(false)?;
    let text = text
        .replace('√', "sqrt")
        .replace('π', "pi")
        .replace('∞', "inf")
        .replace('∪', "U")
        .replace(['·', '×'], "*");
    Some(super::pystr::py_strip(&text).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_pylatexenc() {
        let p = |s: &str| parse_latex(s);
        assert_eq!(p("\\frac{1}{2}").as_deref(), Some("1/2"));
        assert_eq!(p("\\frac12").as_deref(), Some("1/2"));
        assert_eq!(p("\\frac{a+b}{c}").as_deref(), Some("a+b/c"));
        assert_eq!(p("\\sqrt{2}/2").as_deref(), Some("sqrt(2)/2"));
        assert_eq!(p("\\sqrt[3]{8}").as_deref(), Some("sqrt(8)"));
        assert_eq!(p("3 \\times 4").as_deref(), Some("3 *4"));
        assert_eq!(p("\\left(1,2\\right)").as_deref(), Some("(1,2)"));
        assert_eq!(p("1\\frac{1}{2}").as_deref(), Some("1 1/2"));
        assert_eq!(p("5\\,000").as_deref(), Some("5 000"));
        assert_eq!(p("\\{1,2\\}").as_deref(), Some("{1,2}"));
        assert_eq!(p("\\mathbf{x}"), None);
        assert_eq!(p("\\frac{1}"), None);
    }
}
