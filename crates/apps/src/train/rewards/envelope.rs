//! The ground-truth envelope: `<type>TASK</type>` followed by the payload.
//!
//! Released behaviour (`parse_ground_truth`): the **first** `<type>(.*?)</type>` anywhere in the
//! string (DOTALL, so the type may span lines; text before the tag is ignored), the captured type
//! stripped with Python's whitespace set, the payload = everything after that tag, stripped. No
//! tag → the released code crashes with `AttributeError` (`None.group`), reported here as
//! [`RewardError::MissingType`]. Type names are matched exactly (case-sensitive) by the caller.

use std::sync::LazyLock;

use regex::Regex;

use super::error::RewardError;
use super::pystr::{py_strip, re};

static TYPE_TAG: LazyLock<Regex> = LazyLock::new(|| re(r"(?s)<type>(.*?)</type>"));

/// `(type, payload)` of a ground-truth string, both stripped.
pub fn parse_ground_truth(gt: &str) -> Result<(&str, &str), RewardError> {
    let caps = TYPE_TAG.captures(gt).ok_or(RewardError::MissingType)?;
    let (Some(whole), Some(ty)) = (caps.get(0), caps.get(1)) else {
        return Err(RewardError::MissingType);
    };
    Ok((py_strip(ty.as_str()), py_strip(&gt[whole.end()..])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_tag_wins_and_both_parts_are_stripped() {
        assert_eq!(
            parse_ground_truth("x <type> point_ref\n</type> [[1, 2]] \n"),
            Ok(("point_ref", "[[1, 2]]"))
        );
        assert_eq!(
            parse_ground_truth("<type>general_qa</type>B<type>spatial_qa</type>"),
            Ok(("general_qa", "B<type>spatial_qa</type>"))
        );
        assert_eq!(
            parse_ground_truth("<TYPE>general_qa</TYPE>B"),
            Err(RewardError::MissingType)
        );
    }
}
