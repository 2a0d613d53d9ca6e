//! Published numbers from the seed papers, printed beside ours. Each row names its table.

/// A system's published scores per set (×100).
pub struct Published {
    pub system: &'static str,
    /// Where the numbers are printed.
    pub source: &'static str,
    pub scores: &'static [(&'static str, f64)],
}

/// STS 2017 Spearman ρ×100. Seed 003 (Reimers & Gurevych 2020) Tables 1-2, all eleven systems
/// (seed 000 Table 1 reprints their baselines); seed 000 (DuEAM) Tables 1-2. The papers' EN-ES is
/// track 4a (`es-en`), EN-AR is track 2 (`ar-en`); their EN-TR, EN-FR, EN-IT and EN-NL sets are
/// not here (track 6 is unusable, the others were made by the authors).
pub const STS17_SPEARMAN: &[Published] = &[
    Published {
        system: "XLM-R←SBERT-paraphrases",
        source: "seed 003 Tab. 1-2",
        scores: &[("en-en", 88.8), ("es-es", 86.3), ("ar-ar", 79.6), ("ar-en", 82.3), ("en-de", 84.0), ("es-en", 83.1)],
    },
    Published {
        system: "mUSE",
        source: "seed 003 Tab. 1-2",
        scores: &[("en-en", 86.4), ("es-es", 86.9), ("ar-ar", 76.4), ("ar-en", 79.3), ("en-de", 82.1), ("es-en", 79.6)],
    },
    Published {
        system: "LaBSE",
        source: "seed 003 Tab. 1-2",
        scores: &[("en-en", 79.4), ("es-es", 80.8), ("ar-ar", 69.1), ("ar-en", 74.5), ("en-de", 73.8), ("es-en", 65.5)],
    },
    Published {
        system: "XLM-R←SBERT-nli-stsb",
        source: "seed 003 Tab. 1-2",
        scores: &[("en-en", 82.5), ("es-es", 83.5), ("ar-ar", 79.9), ("ar-en", 77.8), ("en-de", 78.9), ("es-en", 79.7)],
    },
    Published {
        system: "mBERT←SBERT-nli-stsb",
        source: "seed 003 Tab. 1-2",
        scores: &[("en-en", 82.5), ("es-es", 83.0), ("ar-ar", 78.8), ("ar-en", 77.2), ("en-de", 78.9), ("es-en", 79.2)],
    },
    Published {
        system: "DistilmBERT←SBERT-nli-stsb",
        source: "seed 003 Tab. 1-2",
        scores: &[("en-en", 82.1), ("es-es", 84.0), ("ar-ar", 77.7), ("ar-en", 76.1), ("en-de", 77.7), ("es-en", 77.6)],
    },
    Published {
        system: "LASER",
        source: "seed 003 Tab. 1-2",
        scores: &[("en-en", 77.6), ("es-es", 79.7), ("ar-ar", 68.9), ("ar-en", 66.5), ("en-de", 64.2), ("es-en", 57.9)],
    },
    Published {
        system: "mBERT-nli-stsb",
        source: "seed 003 Tab. 1-2",
        scores: &[("en-en", 80.2), ("es-es", 83.9), ("ar-ar", 65.3), ("ar-en", 30.9), ("en-de", 62.2), ("es-en", 45.4)],
    },
    Published {
        system: "XLM-R-nli-stsb",
        source: "seed 003 Tab. 1-2",
        scores: &[("en-en", 78.2), ("es-es", 83.1), ("ar-ar", 64.4), ("ar-en", 44.0), ("en-de", 59.5), ("es-en", 54.7)],
    },
    Published {
        system: "mBERT mean",
        source: "seed 003 Tab. 1-2",
        scores: &[("en-en", 54.4), ("es-es", 56.7), ("ar-ar", 50.9), ("ar-en", 16.7), ("en-de", 33.9), ("es-en", 21.5)],
    },
    Published {
        system: "XLM-R mean",
        source: "seed 003 Tab. 1-2",
        scores: &[("en-en", 50.7), ("es-es", 51.8), ("ar-ar", 25.7), ("ar-en", 17.4), ("en-de", 21.3), ("es-en", 10.9)],
    },
    Published {
        system: "DuEAM weakly-sup.",
        source: "seed 000 Tab. 1",
        scores: &[("en-en", 81.9), ("es-es", 83.1), ("en-de", 69.4), ("es-en", 64.6)],
    },
    Published {
        system: "DuEAM unsup.",
        source: "seed 000 Tab. 1",
        scores: &[("en-en", 80.2), ("es-es", 81.5), ("en-de", 64.6), ("es-en", 58.2)],
    },
    Published {
        // Zero-shot: trained on EN-DE data only, tested on the other languages.
        system: "DuEAM weakly-sup., EN-DE only",
        source: "seed 000 Tab. 2",
        scores: &[("es-es", 78.64), ("ar-ar", 69.67), ("es-en", 56.54), ("ar-en", 54.29)],
    },
];

/// STS 2017 Pearson r×100 (seed 002 reports Pearson). Seed 002 (Wieting et al. 2019) Table 2:
/// 300-dim random encoders and SP models trained on OpenSubtitles (OS) with N pairs; its Tr-En
/// column is left out (track 6 is unusable here, see `eval sts`).
pub const STS17_PEARSON: &[Published] = &[
    Published {
        system: "Random TRIGRAM",
        source: "seed 002 Tab. 2",
        scores: &[("ar-ar", 67.9), ("ar-en", 1.8), ("es-es", 77.3), ("es-en", 2.8), ("en-en", 73.7)],
    },
    Published {
        system: "Random SP (20k)",
        source: "seed 002 Tab. 2",
        scores: &[("ar-ar", 61.9), ("ar-en", 17.5), ("es-es", 68.8), ("es-en", 6.5), ("en-en", 67.0)],
    },
    Published {
        system: "SP (20k) OS 1M 300",
        source: "seed 002 Tab. 2",
        scores: &[("ar-ar", 70.0), ("ar-en", 64.9), ("es-es", 82.0), ("es-en", 71.6), ("en-en", 82.2)],
    },
    Published {
        system: "SP (80k) OS 10M 1024",
        source: "seed 002 Tab. 2",
        scores: &[("ar-ar", 76.3), ("ar-en", 75.0), ("es-es", 86.2), ("es-en", 78.2), ("en-en", 84.0)],
    },
];

impl Published {
    pub fn get(&self, set: &str) -> Option<f64> {
        self.scores.iter().find(|(s, _)| *s == set).map(|(_, v)| *v)
    }
}

/// One system's entries across tables, in the order first met.
pub struct SystemColumn<'a> {
    pub system: &'static str,
    pub entries: Vec<&'a Published>,
}

impl SystemColumn<'_> {
    /// The value from the first table that reports `key`, with that table.
    pub fn get(&self, key: &str) -> Option<(f64, &'static str)> {
        self.entries.iter().find_map(|p| p.get(key).map(|v| (v, p.source)))
    }

    /// `seed 003 Tab. 9, seed 003 Tab. 10, ...`
    pub fn sources(&self) -> String {
        self.entries.iter().map(|p| p.source).collect::<Vec<_>>().join(", ")
    }
}

/// Group a table's entries by system (one printed column per system).
pub fn by_system(table: &[Published]) -> Vec<SystemColumn<'_>> {
    let mut cols: Vec<SystemColumn> = Vec::new();
    for p in table {
        match cols.iter_mut().find(|c| c.system == p.system) {
            Some(c) => c.entries.push(p),
            None => cols.push(SystemColumn { system: p.system, entries: vec![p] }),
        }
    }
    cols
}
