//! The training configs of `configs/`, compiled into the binary: `xsent train --config NAME`
//! runs one where no file of that name exists, and `xsent config show NAME` prints it to copy.
//! Their paths name the standard places (`${XSENT_MODELS}`, `${XSENT_DATA}`), so they work from
//! any directory.

/// One built-in config.
pub struct BuiltIn {
    /// The file's stem: `dueam` for `configs/dueam.toml`.
    pub name: &'static str,
    /// What it trains, in a line.
    pub about: &'static str,
    /// The file's text.
    pub text: &'static str,
}

macro_rules! builtin {
    ($name:literal, $about:literal) => {
        BuiltIn { name: $name, about: $about, text: include_str!(concat!("../../configs/", $name, ".toml")) }
    };
}

/// Every file of `configs/`, in name order.
pub const CONFIGS: &[BuiltIn] = &[
    builtin!("disentangle", "meaning and language heads over frozen multilingual-e5-small (seed 004); CPU scale"),
    builtin!(
        "distill",
        "knowledge distillation (seed 003), the recommended CPU config: MiniLM teacher, e5-small student"
    ),
    builtin!("distill-direct", "distillation towards the MiniLM teacher's own vectors, the paper's form; CPU scale"),
    builtin!("distill-multi30k", "distill-direct with Multi30k image captions added; CPU scale"),
    builtin!("distill-paper", "distillation as in seed 003: xlm-roberta-base student, your parallel data; GPU"),
    builtin!("dueam", "DuEAM (seed 000), weakly supervised: e5-small anchor and 4-layer learner; CPU scale"),
    builtin!("dueam-paper", "DuEAM as in seed 000: XLM-R base anchor and learner; GPU"),
    builtin!("dueam-unsup", "DuEAM on random XNLI pairs (unsupervised); CPU scale"),
    builtin!("lightweight", "lightweight dual transformer trained from scratch (seed 001); CPU scale"),
    builtin!("lightweight-paper", "lightweight dual transformer at the paper's scale, on your bitext; GPU"),
    builtin!("sp", "paraphrastic SentencePiece averaging (seed 002); CPU scale"),
    builtin!("sp-paper", "SentencePiece averaging at the paper's scale, on your bitext of millions of pairs"),
];

/// The built-in config `name` names (`dueam` or `dueam.toml`).
pub fn find(name: &str) -> Option<&'static BuiltIn> {
    let stem = name.strip_suffix(".toml").unwrap_or(name);
    CONFIGS.iter().find(|c| c.name == stem)
}

/// The names of every built-in config, comma-separated.
pub fn names() -> String {
    CONFIGS.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table lists every file of configs/, each once, in name order.
    #[test]
    fn every_config_file_is_built_in() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.unwrap().file_name().to_str()?.strip_suffix(".toml").map(String::from))
            .collect();
        files.sort();
        let names: Vec<&str> = CONFIGS.iter().map(|c| c.name).collect();
        assert_eq!(names, files, "add the new config to CONFIGS");
        for c in CONFIGS {
            assert_eq!(c.text, std::fs::read_to_string(dir.join(format!("{}.toml", c.name))).unwrap());
        }
        assert_eq!(find("dueam.toml").map(|c| c.name), Some("dueam"));
        assert_eq!(find("dueam").map(|c| c.name), Some("dueam"));
        assert!(find("configs/dueam.toml").is_none() && find("nope").is_none());
    }
}
