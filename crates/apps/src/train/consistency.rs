//! Embodied-R's rewards (arXiv 2504.12680), with the released behaviour: `choice_accuracy`,
//! ms-swift's `format`, and the logic-consistency reward, weighted 0.7 / 0.1 / 0.2.
//!
//! Sources of truth (read, not copied): `EmbodiedCity/Embodied-R.code` at `174ae99`,
//! `train/reward/choice_accuracy_reward.py` (class `ChoiceAccuracy`),
//! `train/reward/consistency_reward_local.py` (class `ConsistencyReward`; the `_API.py` variant has
//! the same logic behind another client), the weights of `train/train_5GPUs.sh` /
//! `train/train_8GPUs.sh` (`--reward_funcs choice_accuracy format consistency --reward_weights 0.7
//! 0.1 0.2`), and ms-swift's built-in `Format` (`swift/plugin/orm.py`, the pattern as fixed in
//! February 2025, before Embodied-R's release). `crates/apps/src/tests/embodied_r_golden.rs` checks every function
//! here against the released Python on the cases `tests/fixtures/gen_embodied_r_golden.py` writes.
//!
//! # The letter normaliser ([`normalize_choice`], [`normalize_consistency`])
//! The whole text (think block included) is stripped, then the first rule that matches wins:
//! 1. the **last** `$\boxed{X}$`;
//! 2. the **first** `answer\s+X\.?` (so "the answer is B" does *not* match: `is` is in the way);
//! 3. the **last** `(?:^|[^A-Za-z])X\s*\.` (a letter not glued to a word, then a dot);
//! 4. the **last** `(?:^|[^A-Za-z])X(?:$|[^A-Za-z])` (an isolated letter);
//! 5. consistency file only: the first `<answer>(.*?)</answer>` (DOTALL), stripped, normalised
//!    again (reached only when rules 1–4 found nothing in the whole text; its difference is what
//!    comes back when nothing is found: the upper-cased *inner* text);
//! 6. the upper-cased stripped text (a non-letter: graded wrong against a letter).
//!
//! X is A–H, case-insensitive, returned upper-cased. Python `re` semantics are kept where they
//! differ from the regex crate's: IGNORECASE makes `[A-Za-z]` also match `İ ı ſ K` (U+0130,
//! U+0131, U+017F, U+212A) and `s` match `ſ`; `\s` and `strip()` include U+001C..U+001F;
//! `re.finditer` is non-overlapping, so in `A B` the isolated-letter rule consumes the space after
//! `A` and never sees `B` (the result is `A`, not the "last" letter one would expect).
//!
//! # Logic consistency ([`consistency`])
//! 1. `<think>(.*?)</think>` (first, DOTALL), stripped; empty or missing → 0.
//! 2. With a solution: the completion's letter (consistency normaliser) must equal the solution's,
//!    else 0 **without asking the reference model**. Only correct answers are checked.
//! 3. The question: the user message's text; after the last `Question:` with that prefix kept
//!    (`"Question:" + rest.strip()`), else the first lazy match of the four-options regex
//!    (`(.*?)\s*([A-D]\s*\.\s*.*?)` ×4, DOTALL — it ends right after the fourth option's dot),
//!    else the stripped text. An empty user message takes the question from the completion; no
//!    user message at all sends the raw completion as the question.
//! 4. The reference model gets [`REFERENCE_SYSTEM`] and [`reference_prompt`] at temperature 0.1,
//!    10 tokens at most. A non-empty reply is normalised (consistency normaliser); an empty reply
//!    or a failed call falls back to [`extract_answer_from_think`] on the think text (released:
//!    the client returns `""` on any error, and an exception also lands there).
//! 5. 1 when that letter is one of A–H and equals the completion's letter, else 0.
//!
//! So the per-sample reward is `0.7·acc + 0.1·format + 0.2·(acc ∧ reference agrees)`, at most 1.
//!
//! # The reference model ([`ReferenceModel`])
//! Released: a frozen Qwen2.5-VL-3B-Instruct (fallback Qwen2.5-3B-Instruct) behind an
//! OpenAI-style server, or DashScope's `qwen2.5-vl-3b-instruct`. Here: [`OpenAiReference`] (any
//! OpenAI-compatible server, text-only messages, through `pointing::openai`'s client) or
//! [`QwenReference`] (our in-process decoder, text only). Tests plug in a deterministic stub.

use std::sync::LazyLock;

use regex::Regex;

// Python's `str.isspace()` / `strip()`, shared with the released Embodied-R1 rewards.
use super::rewards::re;
pub(crate) use super::rewards::{is_py_space, py_strip};
use crate::pointing::openai::{OpenAiError, OpenAiPointer};
use crate::pointing::qwen::QwenPointer;

/// Weight of `choice_accuracy` in the released training scripts.
pub(crate) const ACCURACY_WEIGHT: f64 = 0.7;
/// Weight of ms-swift's `format`.
pub(crate) const FORMAT_WEIGHT: f64 = 0.1;
/// Weight of the logic-consistency reward.
pub(crate) const CONSISTENCY_WEIGHT: f64 = 0.2;

/// The reference model's system message (interface string: must match exactly; note the hyphen,
/// which the client's unused default lacks).
pub(crate) const REFERENCE_SYSTEM: &str = "You are a professional question-answering assistant.";
/// The reference model's token budget.
pub(crate) const REFERENCE_MAX_TOKENS: usize = 10;
/// The reference model's sampling temperature.
pub(crate) const REFERENCE_TEMPERATURE: f64 = 0.1;

/// The options a letter may take (`VALID_OPTIONS`).
pub(crate) const VALID_OPTIONS: &str = "ABCDEFGH";

/// Why the reference model gave no reply. Every failure is treated like the released client's
/// failures: the answer is then taken from the think text ([`extract_answer_from_think`]).
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// The OpenAI-compatible server failed (unreachable, HTTP error, not a chat completion, …).
    #[error("reference server: {0}")]
    Remote(#[from] OpenAiError),
    /// The in-process model failed.
    #[error("reference model: {0}")]
    Local(String),
    /// Anything else (a test stub's failure, an unavailable backend).
    #[error("{0}")]
    Other(String),
}

/// The frozen model that judges whether a think text leads to the answer.
pub trait ReferenceModel {
    /// The model's reply to one system + user turn (text only).
    fn reply(
        &mut self,
        system: &str,
        user: &str,
        max_tokens: usize,
        temperature: f64,
    ) -> Result<String, ReferenceError>;
}

impl<R: ReferenceModel + ?Sized> ReferenceModel for &mut R {
    fn reply(
        &mut self,
        system: &str,
        user: &str,
        max_tokens: usize,
        temperature: f64,
    ) -> Result<String, ReferenceError> {
        (**self).reply(system, user, max_tokens, temperature)
    }
}

/// The reference model behind an OpenAI-compatible chat server (vLLM, SGLang, the released
/// `start_consistency_model_server.py`): `choices[0].message.content` of a text-only request,
/// with `pointing::openai`'s retries and deadline.
#[derive(Debug)]
pub struct OpenAiReference {
    /// The server's client, asked text-only questions through [`OpenAiPointer::chat_text`].
    pub client: OpenAiPointer,
}

impl OpenAiReference {
    /// A reference model asked through `client`.
    pub fn new(client: OpenAiPointer) -> Self {
        OpenAiReference { client }
    }
}

impl ReferenceModel for OpenAiReference {
    fn reply(
        &mut self,
        system: &str,
        user: &str,
        max_tokens: usize,
        temperature: f64,
    ) -> Result<String, ReferenceError> {
        Ok(self
            .client
            .chat_text(system, user, max_tokens, temperature)?)
    }
}

/// The reference model in process: our Qwen2.5-VL decoder asked without an image
/// ([`QwenPointer::reply`]).
#[derive(Debug)]
pub struct QwenReference {
    /// The loaded decoder, asked without an image.
    pub model: QwenPointer,
}

impl QwenReference {
    /// A reference model answered by `model`.
    pub fn new(model: QwenPointer) -> Self {
        QwenReference { model }
    }
}

impl ReferenceModel for QwenReference {
    fn reply(
        &mut self,
        system: &str,
        user: &str,
        max_tokens: usize,
        temperature: f64,
    ) -> Result<String, ReferenceError> {
        self.model
            .reply(system, user, max_tokens, temperature)
            .map(|r| r.text)
            .map_err(|e| ReferenceError::Local(e.to_string()))
    }
}

// ---------------------------------------------------------------------------------------------
// Python `str` / `re` details.

/// Python's `str.upper()`: full case mapping (`ß` → `SS`), which Rust's `to_uppercase` also
/// applies.
fn py_upper(s: &str) -> String {
    s.to_uppercase()
}

/// Python's `\s`.
const S: &str = r"[\s\x1C-\x1F]";
/// What Python's IGNORECASE `[A-Za-z]` matches (ASCII letters, İ, ı, ſ, K).
const LETTER: &str = r"A-Za-z\x{130}\x{131}\x{17F}\x{212A}";

static BOXED: LazyLock<Regex> = LazyLock::new(|| re(r"\$\\boxed\{([A-Ha-h])\}\$"));
static ANSWER: LazyLock<Regex> = LazyLock::new(|| {
    re(&format!(
        r"[Aa][Nn][Ss\x{{17F}}][Ww][Ee][Rr]{S}+([A-Ha-h])\.?"
    ))
});
static SIMPLE_DOT: LazyLock<Regex> =
    LazyLock::new(|| re(&format!(r"(?:\A|[^{LETTER}])([A-Ha-h]){S}*\.")));
// `$` (no MULTILINE) is `\z` here: every text these patterns see was stripped, so it never ends
// in the newline Python's `$` may stand before.
static SIMPLE: LazyLock<Regex> =
    LazyLock::new(|| re(&format!(r"(?:\A|[^{LETTER}])([A-Ha-h])(?:\z|[^{LETTER}])")));
/// The first `<answer>…</answer>` block (DOTALL), shared by every reader of a reply's answer.
pub(crate) static ANSWER_TAG: LazyLock<Regex> = LazyLock::new(|| re(r"(?s)<answer>(.*?)</answer>"));
/// The first `<think>…</think>` block (DOTALL).
pub(crate) static THINK_TAG: LazyLock<Regex> = LazyLock::new(|| re(r"(?s)<think>(.*?)</think>"));
static FORMAT: LazyLock<Regex> = LazyLock::new(|| {
    re(&format!(
        r"(?s)\A<think>.*?</think>{S}*<answer>.*?</answer>\z"
    ))
});
static OPTIONS: LazyLock<Regex> = LazyLock::new(|| {
    let option = format!(r"([A-D]{S}*\.{S}*.*?)");
    re(&format!(
        r"(?s)(.*?){S}*{option}{S}*{option}{S}*{option}{S}*{option}"
    ))
});
/// Python's word characters for `\b` in a `str` pattern: `str.isalnum()` (categories L and N) or
/// `_`.
static PY_WORD: LazyLock<Regex> = LazyLock::new(|| re(r"\A[\p{L}\p{N}_]\z"));

fn is_py_word(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphanumeric() || c == '_';
    }
    let mut buf = [0u8; 4];
    PY_WORD.is_match(c.encode_utf8(&mut buf))
}

/// Whether `c` matches the pattern character `p` (an ASCII lower-case letter or a space) under
/// Python's IGNORECASE: `i` also matches `İ ı`, `s` also `ſ`.
fn py_ci_eq(c: char, p: char) -> bool {
    c.to_ascii_lowercase() == p
        || (p == 'i' && matches!(c, '\u{130}' | '\u{131}'))
        || (p == 's' && c == '\u{17F}')
}

/// `[A-H]` under IGNORECASE.
fn is_choice_letter(c: char) -> bool {
    matches!(c, 'A'..='H' | 'a'..='h')
}

/// The last capture 1 of `re.finditer`, upper-cased.
fn last_letter(re: &Regex, s: &str) -> Option<String> {
    re.captures_iter(s)
        .last()
        .and_then(|c| c.get(1))
        .map(|m| m.as_str().to_ascii_uppercase())
}

fn first_letter(re: &Regex, s: &str) -> Option<String> {
    re.captures(s)
        .and_then(|c| c.get(1))
        .map(|m| m.as_str().to_ascii_uppercase())
}

/// Rules 1–4 of the normaliser on an already stripped text.
fn letter_rules(s: &str) -> Option<String> {
    last_letter(&BOXED, s)
        .or_else(|| first_letter(&ANSWER, s))
        .or_else(|| last_letter(&SIMPLE_DOT, s))
        .or_else(|| last_letter(&SIMPLE, s))
}

/// `ChoiceAccuracy.normalize_answer`: the answer letter of `answer`, or its upper-cased stripped
/// text when no rule finds one (see the module docs).
pub(crate) fn normalize_choice(answer: &str) -> String {
    let s = py_strip(answer);
    letter_rules(s).unwrap_or_else(|| py_upper(s))
}

/// `ConsistencyReward.normalize_answer`: [`normalize_choice`] with the `<answer>` recursion before
/// the fallback.
pub(crate) fn normalize_consistency(answer: &str) -> String {
    let s = py_strip(answer);
    if let Some(letter) = letter_rules(s) {
        return letter;
    }
    if let Some(inner) = ANSWER_TAG.captures(s).and_then(|c| c.get(1)) {
        return normalize_consistency(inner.as_str());
    }
    py_upper(s)
}

/// ms-swift's `Format`: 1 when the whole completion is `<think>…</think>`, whitespace,
/// `<answer>…</answer>` and nothing else (`re.match` + `(?![\s\S])`: trailing text, even a
/// newline, gives 0).
pub(crate) fn format_reward(completion: &str) -> f64 {
    if FORMAT.is_match(completion) {
        1.0
    } else {
        0.0
    }
}

/// `ChoiceAccuracy`: 1 when the completion's and the solution's letters are equal.
pub fn choice_accuracy(completion: &str, solution: &str) -> f64 {
    if normalize_choice(completion) == normalize_choice(solution) {
        1.0
    } else {
        0.0
    }
}

/// `extract_think_content`: the first `<think>…</think>` block (DOTALL), stripped; `""` when
/// there is none.
pub(crate) fn extract_think_content(text: &str) -> &str {
    THINK_TAG
        .captures(text)
        .and_then(|c| c.get(1))
        .map_or("", |m| py_strip(m.as_str()))
}

/// `extract_question`: the question part of a user message (see the module docs, step 3).
pub(crate) fn extract_question(text: &str) -> String {
    if text.is_empty() {
        return String::new();
    }
    if let Some(pos) = text.rfind("Question:") {
        let rest = &text[pos + "Question:".len()..];
        return format!("Question:{}", py_strip(rest));
    }
    if let Some(m) = OPTIONS.find(text) {
        return py_strip(m.as_str()).to_owned();
    }
    py_strip(text).to_owned()
}

/// The user message sent to the reference model (interface string, exact).
pub(crate) fn reference_prompt(question: &str, think: &str) -> String {
    format!(
        "This is a multiple-choice question. Based on the following question and thinking \
         process, select the most appropriate option (one letter from A-H).\n\nPlease answer \
         with only one letter, without any explanation or additional content.\n\nQuestion: \
         {question}\n\nThinking process: {think}\n\nPlease respond with only one letter (A-H):"
    )
}

const CONCLUSION_WORDS: [&str; 8] = [
    "so",
    "thus",
    "in conclusion",
    "the answer is",
    "choose",
    "select",
    "option",
    "answer",
];
const CONCLUSION_WORDS_SHORT: [&str; 4] = ["the answer is", "choose", "select", "option"];

/// Length (chars) of `word` matched case-insensitively at the start of `chars`.
fn match_word(chars: &[char], word: &str) -> Option<usize> {
    let n = word.chars().count();
    (chars.len() >= n && chars.iter().zip(word.chars()).all(|(&c, p)| py_ci_eq(c, p))).then_some(n)
}

/// The letter of the last of `re.finditer`'s non-overlapping matches, where `match_at(p)` is the
/// match starting at char `p`, if any (its letter and end).
fn last_match(chars: &[char], match_at: impl Fn(usize) -> Option<(char, usize)>) -> Option<char> {
    let mut last = None;
    let mut p = 0;
    while p < chars.len() {
        match match_at(p) {
            Some((letter, end)) => {
                last = Some(letter);
                p = end;
            }
            None => p += 1,
        }
    }
    last
}

/// `re.finditer(r"(?:WORDS)[^A-H]*([A-H])\b", s, re.I)`: the last match's letter.
fn conclusion_after_word(chars: &[char], words: &[&str]) -> Option<char> {
    last_match(chars, |p| {
        // At most one alternative can match at a position (they differ within their shared
        // length), and what follows is deterministic, so the first that matches decides.
        let n = words.iter().find_map(|w| match_word(&chars[p..], w))?;
        // `[^A-H]*` is greedy and stops at the first A–H letter, which must be the group;
        // backing off cannot help (the next char would be a non-letter of A–H).
        let mut q = p + n;
        while q < chars.len() && !is_choice_letter(chars[q]) {
            q += 1;
        }
        let letter = *chars.get(q)?;
        let end = q + 1;
        let boundary = chars.get(end).is_none_or(|&c| !is_py_word(c));
        boundary.then_some((letter, end))
    })
}

/// `re.finditer(r"\b([A-H])\s+(?:is correct)\b", s, re.I)`: the last match's letter.
fn conclusion_is_correct(chars: &[char]) -> Option<char> {
    last_match(chars, |p| {
        let letter = chars[p];
        if !is_choice_letter(letter) || (p > 0 && is_py_word(chars[p - 1])) {
            return None;
        }
        let mut q = p + 1;
        while q < chars.len() && is_py_space(chars[q]) {
            q += 1;
        }
        if q == p + 1 {
            return None;
        }
        let n = match_word(&chars[q..], "is correct")?;
        let end = q + n;
        chars
            .get(end)
            .is_none_or(|&c| !is_py_word(c))
            .then_some((letter, end))
    })
}

/// `extract_answer_from_think`: the fallback when the reference model gives nothing. The **last**
/// match of the first of boxed / `answer X` / `X.` / isolated letter that matches at all (note:
/// last, where the normaliser takes the first `answer X`), else the last letter after a
/// conclusion word ("so", "thus", "the answer is", "option", …) or before "is correct"; `""` when
/// nothing is found. `think` is the stripped think text.
pub(crate) fn extract_answer_from_think(think: &str) -> String {
    for pattern in [&*BOXED, &*ANSWER, &*SIMPLE_DOT, &*SIMPLE] {
        if let Some(letter) = last_letter(pattern, think) {
            return letter;
        }
    }
    let chars: Vec<char> = think.chars().collect();
    conclusion_after_word(&chars, &CONCLUSION_WORDS)
        .or_else(|| conclusion_after_word(&chars, &CONCLUSION_WORDS_SHORT))
        .or_else(|| conclusion_is_correct(&chars))
        .map_or_else(String::new, |c| c.to_ascii_uppercase().to_string())
}

/// The letter the reference model picks for `question` and `think`
/// (`call_local_model_for_inference`): its normalised reply, or the think text's own answer when
/// the call fails or the reply is empty. May be a non-letter (an upper-cased reply).
pub(crate) fn reference_answer(
    question: &str,
    think: &str,
    reference: &mut dyn ReferenceModel,
) -> String {
    let user = reference_prompt(question, think);
    match reference.reply(
        REFERENCE_SYSTEM,
        &user,
        REFERENCE_MAX_TOKENS,
        REFERENCE_TEMPERATURE,
    ) {
        Ok(reply) if !reply.is_empty() => normalize_consistency(&reply),
        Ok(_) => extract_answer_from_think(think),
        Err(e) => {
            tracing::debug!(
                "consistency reference call failed, answer taken from the think text: {e}"
            );
            extract_answer_from_think(think)
        }
    }
}

/// The logic-consistency reward of one completion (see the module docs). `solution`: the ground
/// truth (`None`: every completion is checked); `question`: the user message's text (`None`: the
/// dataset has no user message, and the completion itself is sent as the question).
pub fn consistency(
    completion: &str,
    solution: Option<&str>,
    question: Option<&str>,
    reference: &mut dyn ReferenceModel,
) -> f64 {
    let think = extract_think_content(completion);
    if think.is_empty() {
        return 0.0;
    }
    let answer = normalize_consistency(completion);
    if let Some(solution) = solution {
        if answer != normalize_consistency(solution) {
            return 0.0;
        }
    }
    let question = match question {
        Some("") => extract_question(completion),
        Some(q) => extract_question(q),
        None => completion.to_owned(),
    };
    if question.is_empty() {
        return 0.0;
    }
    let picked = reference_answer(&question, think, reference);
    let valid = picked.len() == 1 && VALID_OPTIONS.contains(picked.as_str());
    if valid && picked == answer {
        1.0
    } else {
        0.0
    }
}

/// Every Embodied-R reward of one completion and their weighted sum.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct EmbodiedRScore {
    /// `0.7·accuracy + 0.1·format + 0.2·consistency`.
    pub overall: f64,
    /// `choice_accuracy`: 1 when the completion's letter equals the solution's, else 0.
    pub accuracy: f64,
    /// ms-swift's `format` reward: 1 when the completion is exactly `<think>…</think>` then
    /// `<answer>…</answer>`, else 0.
    pub format: f64,
    /// The logic-consistency reward: 1 when the answer is correct and the reference model, given
    /// the think text, picks the same letter, else 0.
    pub consistency: f64,
}

/// The three released rewards of one completion, weighted as the training scripts weight them.
pub fn embodied_r_score(
    completion: &str,
    solution: &str,
    question: Option<&str>,
    reference: &mut dyn ReferenceModel,
) -> EmbodiedRScore {
    let accuracy = choice_accuracy(completion, solution);
    let format = format_reward(completion);
    let consistency = consistency(completion, Some(solution), question, reference);
    EmbodiedRScore {
        overall: ACCURACY_WEIGHT * accuracy
            + FORMAT_WEIGHT * format
            + CONSISTENCY_WEIGHT * consistency,
        accuracy,
        format,
        consistency,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Result<&'static str, ()>, usize);

    impl ReferenceModel for Fixed {
        fn reply(&mut self, _: &str, _: &str, _: usize, _: f64) -> Result<String, ReferenceError> {
            self.1 += 1;
            self.0
                .map(str::to_owned)
                .map_err(|()| ReferenceError::Other("down".into()))
        }
    }

    #[test]
    fn normaliser_priority_and_quirks() {
        assert_eq!(normalize_choice("so $\\boxed{b}$ or $\\boxed{C}$"), "C");
        assert_eq!(normalize_choice("answer c. then answer D"), "C");
        assert_eq!(normalize_choice("the answer is B"), "B"); // isolated letter, not `answer X`
        assert_eq!(normalize_choice("A. or B."), "B");
        assert_eq!(normalize_choice("A B"), "A"); // non-overlapping finditer
        assert_eq!(normalize_choice("  none  "), "NONE");
        assert_eq!(normalize_choice("ıA"), "ıA".to_uppercase()); // ı is a letter to Python
        assert_eq!(normalize_consistency("<answer>xyz</answer>"), "XYZ");
        assert_eq!(
            normalize_choice("<answer>xyz</answer>"),
            "<ANSWER>XYZ</ANSWER>"
        );
    }

    #[test]
    fn format_is_a_full_match() {
        assert_eq!(format_reward("<think>a</think>\n<answer>B</answer>"), 1.0);
        assert_eq!(format_reward("<think>a</think>\n<answer>B</answer>\n"), 0.0);
        assert_eq!(format_reward(" <think>a</think><answer>B</answer>"), 0.0);
    }

    #[test]
    fn wrong_answers_never_reach_the_reference() {
        let mut r = Fixed(Ok("B"), 0);
        let c = "<think>because B</think><answer>B</answer>";
        assert_eq!(consistency(c, Some("C"), Some("Q"), &mut r), 0.0);
        assert_eq!(r.1, 0);
        assert_eq!(consistency(c, Some("B"), Some("Q"), &mut r), 1.0);
        assert_eq!(r.1, 1);
        let mut down = Fixed(Err(()), 0);
        // The fallback reads the think text: "because B" → B.
        assert_eq!(consistency(c, Some("B"), Some("Q"), &mut down), 1.0);
        let s = embodied_r_score(c, "B", Some("Q"), &mut r);
        assert!((s.overall - 1.0).abs() < 1e-12);
    }

    #[test]
    fn conclusion_fallbacks() {
        assert_eq!(extract_answer_from_think("I choose optionb"), "B");
        assert_eq!(extract_answer_from_think("xA is correct"), "");
        assert_eq!(extract_answer_from_think("so ab"), "");
        assert_eq!(extract_answer_from_think("nothing here"), "");
    }
}
