//! Instruction → intent: which object to move, which part to hold, where it should go. This decides
//! which abilities to ask for (affordance branch: OFG or REG for the object, RRG for the place; trace
//! branch: one VTG). A small grammar of tabletop instructions, not an NLU: anything it cannot read is
//! a clear error naming the instruction, and the trace branch still accepts it.

/// How the object should end up relative to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// Inside the target ("in", "into", "inside").
    In,
    /// On top of the target ("on", "onto", "on top of").
    On,
    /// On the table to the target's left in the image ("left of", "to the left of").
    LeftOf,
    /// On the table to the target's right in the image ("right of", "to the right of").
    RightOf,
    /// Pick the object up and hold it (no target).
    PickUp,
    /// A target phrase the grammar does not classify ("next to", "near", "to"): RRG decides.
    Near,
}

/// What an instruction asks for, as the grammar read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    /// The instruction as given, trimmed.
    pub instruction: String,
    /// The object phrase, without leading article ("red block").
    pub object: String,
    /// Functional part to hold ("handle"), if the instruction names one.
    pub part: Option<String>,
    /// Where the object should end up relative to the target.
    pub relation: Relation,
    /// The target phrase ("pan"), absent for `PickUp`.
    pub target: Option<String>,
}

impl Intent {
    /// The REG query for the object ("the red block").
    pub fn object_query(&self) -> String {
        format!("the {}", self.object)
    }
}

/// An instruction the grammar cannot read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("cannot tell which object to move and where from `{instruction}`: {reason}; expected e.g. `put the pepper in the pan`, `stack the red block on the blue block`, `move the cup to the right of the box`, `pick up the knife by its handle`")]
pub struct InstructionError {
    /// The instruction as given.
    pub instruction: String,
    /// What the grammar could not read, for the user to fix.
    pub reason: String,
}

const VERBS: &[&str] = &[
    "pick up", "put", "place", "move", "stack", "set", "drop", "take", "push", "bring",
];

/// Target prepositions, longest first so "on top of" wins over "on".
const PREPOSITIONS: &[(&str, Relation)] = &[
    ("to the right of", Relation::RightOf),
    ("to the left of", Relation::LeftOf),
    ("on the right of", Relation::RightOf),
    ("on the left of", Relation::LeftOf),
    ("right of", Relation::RightOf),
    ("left of", Relation::LeftOf),
    ("on top of", Relation::On),
    ("inside", Relation::In),
    ("into", Relation::In),
    ("onto", Relation::On),
    ("in", Relation::In),
    ("on", Relation::On),
    ("next to", Relation::Near),
    ("near", Relation::Near),
    ("to", Relation::Near),
];

/// Reads `instruction` (case and punctuation ignored) as a known verb, the object phrase, an
/// optional part ("by its handle") and an optional target phrase after the earliest preposition.
/// No preposition means [`Relation::PickUp`].
pub fn parse_instruction(instruction: &str) -> Result<Intent, InstructionError> {
    let err = |reason: String| InstructionError {
        instruction: instruction.to_string(),
        reason,
    };
    let norm: String = instruction
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == ' ' || c == '-' {
                c
            } else {
                ' '
            }
        })
        .collect();
    let words: Vec<&str> = norm.split_whitespace().collect();
    let text = words.join(" ");
    let rest = VERBS
        .iter()
        .find_map(|v| {
            text.strip_prefix(v)
                .filter(|r| r.is_empty() || r.starts_with(' '))
        })
        .map(str::trim)
        .ok_or_else(|| {
            err(format!(
                "it does not start with a verb the grammar knows ({})",
                VERBS.join(", ")
            ))
        })?;
    // "pick up the knife by its handle" / "put the X ..., holding the handle"
    let (rest, part) = split_part(rest);
    // The earliest preposition splits object from target; at one position the longest wins.
    let split = PREPOSITIONS
        .iter()
        .filter_map(|(p, rel)| {
            let pat = format!(" {p} ");
            rest.find(&pat).map(|i| (i, pat.len(), *rel))
        })
        .min_by_key(|(i, len, _)| (*i, usize::MAX - len));
    let (object, relation, target) = match split {
        Some((i, len, rel)) => (
            &rest[..i],
            rel,
            Some(strip_article(&rest[i + len..]).to_string()),
        ),
        None => (rest, Relation::PickUp, None),
    };
    let object = strip_article(object).trim().to_string();
    if object.is_empty() {
        return Err(err("no object is named after the verb".to_owned()));
    }
    if target.as_deref().is_some_and(str::is_empty) {
        return Err(err(format!(
            "nothing is named after `{}` (where should `{object}` go?)",
            split.map_or("", |(i, len, _)| rest[i..i + len].trim())
        )));
    }
    Ok(Intent {
        instruction: instruction.trim().to_string(),
        object,
        part,
        relation,
        target,
    })
}

fn split_part(rest: &str) -> (&str, Option<String>) {
    for marker in [
        " by its ",
        " by the ",
        " holding its ",
        " holding the ",
        " using its ",
    ] {
        if let Some(i) = rest.find(marker) {
            let after = &rest[i + marker.len()..];
            // The part phrase ends at the next preposition, if any ("by its handle and put it in ...").
            let part = after.split(" and ").next().unwrap_or(after).trim();
            if !part.is_empty() {
                return (&rest[..i], Some(part.to_string()));
            }
        }
    }
    (rest, None)
}

fn strip_article(s: &str) -> &str {
    let s = s.trim();
    if ["the", "a", "an", "its", "it"].contains(&s) {
        return "";
    }
    for a in ["the ", "a ", "an ", "its ", "it "] {
        if let Some(r) = s.strip_prefix(a) {
            return r.trim();
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Intent {
        parse_instruction(s).unwrap()
    }

    #[test]
    fn reads_the_tabletop_grammar() {
        let i = p("Put the pepper in the pan.");
        assert_eq!(
            (i.object.as_str(), i.relation, i.target.as_deref()),
            ("pepper", Relation::In, Some("pan"))
        );
        let i = p("stack the green block on top of the yellow block");
        assert_eq!(
            (i.object.as_str(), i.relation, i.target.as_deref()),
            ("green block", Relation::On, Some("yellow block"))
        );
        let i = p("move the nearest object to the right of the box");
        assert_eq!(
            (i.object.as_str(), i.relation, i.target.as_deref()),
            ("nearest object", Relation::RightOf, Some("box"))
        );
        let i = p("put eggplant into yellow basket");
        assert_eq!(
            (i.object.as_str(), i.relation, i.target.as_deref()),
            ("eggplant", Relation::In, Some("yellow basket"))
        );
        let i = p("pick up the knife by its handle");
        assert_eq!(
            (i.object.as_str(), i.part.as_deref(), i.relation),
            ("knife", Some("handle"), Relation::PickUp)
        );
        assert_eq!(i.object_query(), "the knife");
        let i = p("put the spoon on the towel");
        assert_eq!(
            (i.relation, i.target.as_deref()),
            (Relation::On, Some("towel"))
        );
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        for (s, reason) in [
            ("", "does not start with a verb"),
            (
                "hello there",
                "does not start with a verb the grammar knows (pick up, put",
            ),
            ("put", "no object is named"),
            ("put the in the bowl", "no object is named"),
            (
                "put the cup in the",
                "nothing is named after `in` (where should `cup` go?)",
            ),
        ] {
            let e = parse_instruction(s).expect_err(s);
            assert!(e.reason.contains(reason), "{s:?}: {e}");
            assert!(e.to_string().contains(&format!("`{s}`")), "{e}");
        }
    }
}
