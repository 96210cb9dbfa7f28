//! Where a bot's ranges come from: [`RangeSource`], a file or a URL.

use std::path::PathBuf;

/// Where a bot's ranges come from: a local file (re-read when it changes) or a URL (fetched
/// on start and every `ranges.refresh_interval_s`, last good copy cached on disk).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RangeSource {
    /// A file in the vendors' format.
    File(PathBuf),
    /// An `http://` or `https://` address of a document in the vendors' format.
    Url(String),
}

impl RangeSource {
    /// `http://...` and `https://...` are URLs (scheme case-insensitive); anything else is a
    /// file path.
    pub fn parse(text: &str) -> RangeSource {
        let lower = text.get(..8).unwrap_or(text).to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            RangeSource::Url(text.to_string())
        } else {
            RangeSource::File(PathBuf::from(text))
        }
    }

    /// The source as written in logs and metric labels: the path or the URL.
    pub fn label(&self) -> String {
        match self {
            RangeSource::File(p) => p.display().to_string(),
            RangeSource::Url(u) => u.clone(),
        }
    }

    /// True for a URL source.
    pub fn is_url(&self) -> bool {
        matches!(self, RangeSource::Url(_))
    }
}

impl std::fmt::Display for RangeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_urls_or_files() {
        assert_eq!(
            RangeSource::parse("https://openai.com/gptbot.json"),
            RangeSource::Url("https://openai.com/gptbot.json".into())
        );
        assert_eq!(
            RangeSource::parse("HTTP://127.0.0.1:8080/r.json"),
            RangeSource::Url("HTTP://127.0.0.1:8080/r.json".into())
        );
        assert_eq!(
            RangeSource::parse("ranges/gptbot.json"),
            RangeSource::File(PathBuf::from("ranges/gptbot.json"))
        );
        assert_eq!(
            RangeSource::parse("https"),
            RangeSource::File(PathBuf::from("https"))
        );
        assert_eq!(RangeSource::parse("/a/b.json").label(), "/a/b.json");
        assert!(RangeSource::parse("http://x.example/r.json").is_url());
    }
}
