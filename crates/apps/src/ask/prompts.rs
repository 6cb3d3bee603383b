//! The texts of Embodied-R's two stages, as the released code writes them
//! (`EmbodiedCity/Embodied-R.code` at `174ae99`): the perception prompts and the video-content
//! summary of `train/conver_format/VLM_perception_local.py` (`analyze_video`, `split_points`,
//! `derive_video_content_str`, the `qa_w_content` template of its main loop, `extract_qa`,
//! `question_fil`), and the reasoning model's system prompt of `train/train_8GPUs.sh`
//! (`SYSTEM_PROMPT`, passed to ms-swift as `--system`).
//!
//! Why the exact strings, odd spacing included: the released prompts are Python strings continued
//! with a backslash inside the literal, so each continued line keeps its indentation as spaces;
//! a model trained on those prompts saw those spaces. Rebuilding them "cleaned up" would ask a
//! slightly different question than the one the weights learned.

use std::sync::LazyLock;

use regex::Regex;

/// The reasoning model's system prompt (`SYSTEM_PROMPT` of the released training scripts).
pub const REASONING_SYSTEM: &str = "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant first thinks about the reasoning process in the mind and then provides the user with the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., <think> reasoning process here </think> \n<answer> answer here </answer>. Ensure that your answer is consistent with and directly derived from your thinking process, maintaining logical coherence between the two sections. User: . Assistant:";

/// The first key frame's perception prompt; `{qa}` is the question ([`extract_qa`]).
const FIRST_FRAME: &str = "I provide you with the first-person perspective of an intelligent agent.                         Please output a description of the current observed scene.                         When describing the scene, focus on using features such as color and shape to characterize the objects.                         Additionally, emphasize the spatial relationship between the agent itself and the surrounding environment.                         You should first visualize the three-dimensional space around the agent.                         When describing relative positions, use terms such as 'to the left,' 'ahead-left,' or 'below,' rather than merely stating their positions within the field of view.                         More important, if the objects mentioned in the following question appear in the images, please make sure to describe them: '{qa}'. To reiterate, don't answer this question and don't give any option, you just need to observe whether the image contains the objects mentioned in the question/option. \n                        The response should be concise and clear.";

/// Every later key frame's prompt, asked with the previous key frame and this one.
const NEXT_FRAME: &str = "I provide you with the agent's first-person perspective. Two images represent the field of view before and after the action. Please output: \n                                    1. Based on the relative positional changes of objects in the field of view, determine the action performed (only output one of the following options without redundant content): Move forward, move backward, move left, move right, move upward, move downward, rotate left, rotate right, tilt downward, or tilt upward. \n                                    2. Analyze the post-action field of view compared to the pre-action view, identifying any newly captured spatial information. This includes objects that were previously invisible or unclear. Note that many objects of the same category may appear repetitive, such as buildings in a city, but they might differ in color or shape. When describing these, include features such as color and shape. Additionally, focus on the relationship between the agent and its surrounding environment. To do so, first imagine the three-dimensional scene around the agent. When describing relative positions, use terms such as 'to the left,' 'in the front-left,' or 'below' rather than simply referring to their positions in the field of view. \n                                    3. If the objects mentioned in the following question appear in the images, please make sure to describe them: '{qa}'. To reiterate, don't answer this question and don't give any option, you just need to observe whether the image contains the objects mentioned in the question/option. \n                                    Ensure responses are concise and clear.";

/// The head of the video-content summary.
const VIDEO_HEAD: &str = "The content of the video will be described in the form of text.     The 0th frame is the initial frame, which includes the scene that agent observe at the initial position.     The agent keeps moving, thus constantly obtaining new visual observations (frames).     The last frame is the visual observation at the current position.";

/// The reasoning model's user message up to the video summary, between the summary and the
/// question ([`question_fil`]), in the released `qa_w_content` template.
const REASONING_HEAD: &str = "Please assume the role of an agent. The video represents your egocentric observations from the past to the present.             Video content: \n<\n";
const REASONING_MID: &str = "\n>\n            Question: ";

/// `extract_qa`: the text after the first `Question:`, stripped; the whole text when there is
/// none.
pub fn extract_qa(text: &str) -> &str {
    match text.find("Question:") {
        Some(i) => text[i + "Question:".len()..].trim(),
        None => text,
    }
}

/// `question_fil`: the text after the first `Question:` (not stripped); the whole text when
/// there is none.
fn question_fil(text: &str) -> &str {
    match text.find("Question:") {
        Some(i) => &text[i + "Question:".len()..],
        None => text,
    }
}

/// The perception prompt for key frame `k` (0: the scene; later: what changed between the
/// previous key frame and this one), asked with the question's objects in mind.
pub fn perception_prompt(k: usize, question: &str) -> String {
    let template = if k == 0 { FIRST_FRAME } else { NEXT_FRAME };
    template.replace("{qa}", extract_qa(question))
}

/// One key frame's description, split as `split_points` splits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description {
    /// The action the model named (point 1 of a later frame's answer); `None` for frame 0 and
    /// for an answer without the numbered points.
    pub action: Option<String>,
    /// What the frame shows (points 2 and 3 joined; the whole answer when it is not numbered).
    pub view: String,
}

static POINT_1: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)(?:###\s*1\.|1\.)(.*?)\n\s*(?:###\s*2\.|2\.)").expect("static")
});
static POINT_2: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)(?:###\s*2\.|2\.)(.*?)\n\s*(?:###\s*3\.|3\.)").expect("static")
});
static POINT_3: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?s)(?:###\s*3\.|3\.)(.*)").expect("static"));

/// `split_points` on one answer: frame 0's answer is all view. A later frame's answer holding
/// `1.`, `2.` and `3.` is cut at the numbered points (point 1 the action, points 2 + 3 the view;
/// the released code raises, and keeps the whole text as the view, when point 2 is not found);
/// otherwise the whole answer is the view and the action is unknown. (The released regexes end
/// each point with a look-ahead; the `regex` crate has none, so the next marker is matched and
/// left out of the group instead: the same captures.)
pub fn split_description(k: usize, text: &str) -> Description {
    let whole = || Description {
        action: None,
        view: text.to_owned(),
    };
    if k == 0 || !(text.contains("1.") && text.contains("2.") && text.contains("3.")) {
        return whole();
    }
    let group = |re: &Regex| {
        re.captures(text)
            .and_then(|c| c.get(1))
            .map(|m| m.as_str().trim().to_owned())
    };
    let Some(point_2) = group(&POINT_2) else {
        return whole();
    };
    let view = match group(&POINT_3) {
        Some(point_3) => format!("{point_2} {point_3}"),
        None => point_2,
    };
    Description {
        action: group(&POINT_1),
        view,
    }
}

/// `derive_video_content_str`: the summary of every key frame's description. A later frame
/// whose action is unknown reads `After None` (Python's `'%s' % None`), as the released text does.
pub fn video_content(descriptions: &[Description]) -> String {
    let mut out = VIDEO_HEAD.to_owned();
    for (i, d) in descriptions.iter().enumerate() {
        if i == 0 {
            out.push_str(&format!("\nFrame 0: Observe: {}", d.view));
        } else {
            let action = d.action.as_deref().unwrap_or("None");
            out.push_str(&format!("\nFrame {i}: After {action}, Observe: {}", d.view));
        }
    }
    out
}

/// The reasoning model's user message for `question` over the key frames' `descriptions`.
pub fn reasoning_prompt(descriptions: &[Description], question: &str) -> String {
    // Concatenated, not substituted: a description may itself contain any placeholder text.
    format!(
        "{REASONING_HEAD}{}{REASONING_MID}{}",
        video_content(descriptions),
        question_fil(question)
    )
}
