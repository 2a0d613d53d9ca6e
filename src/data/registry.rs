//! The benchmark and corpus files xsent reads, as one table: each data set's files with where
//! each comes from (a public GitHub repository at a pinned commit), its size and sha256, and
//! what this project may use it for ([`Split`]). `xsent data fetch` downloads from it
//! (src/data/fetch.rs); other checks (which files are evaluation data) read it too.
//!
//! The files are those of `../shared/data` (its README names their origins), in the same
//! layout, which the evaluators read. The sizes and checksums are those files'; the STS 2017
//! zip archives are checked through the files taken from them.

use Split::{Dev, Notice, Test, Train};

/// What the project may use a file for (../shared/data/README.md): evaluation only, choosing
/// models and settings, or training. Readme and licence files are notices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Train,
    Dev,
    Test,
    Notice,
}

impl Split {
    pub fn name(self) -> &'static str {
        match self {
            Train => "train",
            Dev => "dev",
            Test => "test",
            Notice => "notice",
        }
    }
}

/// A GitHub repository at a commit.
#[derive(Debug)]
pub struct Repo {
    /// `owner/name`.
    pub name: &'static str,
    pub commit: &'static str,
}

/// Where a file comes from.
#[derive(Debug)]
pub enum Origin {
    /// The file itself, at `path` in the repository.
    Raw { repo: &'static Repo, path: &'static str },
    /// A member of the zip archive at `archive` in the repository.
    Zip { repo: &'static Repo, archive: &'static str, member: &'static str },
    /// The gunzipped content of another file of the same set (its path in the data directory).
    Gunzip { of: &'static str },
}

/// One file of a data set.
#[derive(Debug)]
pub struct File {
    /// Its path in the data directory.
    pub path: &'static str,
    pub size: u64,
    pub sha256: &'static str,
    pub split: Split,
    pub origin: Origin,
}

/// A data set `xsent data fetch NAME` downloads.
#[derive(Debug)]
pub struct DataSet {
    pub name: &'static str,
    pub about: &'static str,
    /// The licence as its source states it.
    pub licence: &'static str,
    pub files: &'static [File],
}

/// Every data set.
pub const SETS: &[DataSet] = &[
    DataSet {
        name: "tatoeba",
        about: "Tatoeba similarity search (LASER v1): 90 of its 112 languages, each with English",
        licence: "Tatoeba's terms of use (CC BY 2.0 FR); LASER's code BSD",
        files: TATOEBA,
    },
    DataSet {
        name: "sts17",
        about: "SemEval-2017 STS test sets (tracks 1-6 with gold scores) and the extended en-de set",
        licence: "CC BY-SA 4.0 (en-de: none stated)",
        files: STS17,
    },
    DataSet {
        name: "stsb",
        about: "English STS benchmark: train, dev and test",
        licence: "see its LICENSE.txt",
        files: STSB,
    },
    DataSet {
        name: "bucc",
        about: "BUCC 2018 bitext mining, zh-en sample split (named dev)",
        licence: "none stated",
        files: BUCC,
    },
    DataSet {
        name: "xnli",
        about: "XNLI dev and test in 15 languages (the recipes' training text), and 9,999 en-de pairs from it",
        licence: "CC BY-NC 4.0 (per third-party listing)",
        files: XNLI,
    },
    DataSet {
        name: "multi30k",
        about: "Multi30k task 1 image captions in en, de, fr, cs: train, val and test sets",
        licence: "none stated",
        files: MULTI30K,
    },
];

/// The data set `name` names.
pub fn find(name: &str) -> Option<&'static DataSet> {
    SETS.iter().find(|s| s.name == name)
}

/// The names of every data set, comma-separated.
pub fn names() -> String {
    SETS.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
}

/// Every file the project may only evaluate on ([`Split::Test`]), with its data set.
pub fn test_files() -> impl Iterator<Item = (&'static DataSet, &'static File)> {
    SETS.iter().flat_map(|s| s.files.iter().map(move |f| (s, f))).filter(|(_, f)| f.split == Test)
}

const LASER: Repo = Repo { name: "facebookresearch/LASER", commit: "74bc6ae7ffb7cba670fe0f428d0ede9f666fb821" };
const STS_EVAL: Repo = Repo { name: "eduardofv/sts_eval", commit: "b4cd273eb2c6cc0de34ebeffebd12ebf155ecff6" };
const CYCLE_NLP_GAN: Repo =
    Repo { name: "micheledaddetta1/CycleNLPGAN", commit: "b033db0adf4e7a30f60066bcbdaa3a7c3ad32226" };
const FEW_SHOTS: Repo =
    Repo { name: "wuhjie/few_shots_that_matters_wu", commit: "6bfe6324e428ec21a777b5543cd8e50ec82dcb3c" };
const MULTI30K_REPO: Repo = Repo { name: "multi30k/dataset", commit: "a3d2e0d26b56f3846f66a952536ffed4e401d05a" };

const fn f(path: &'static str, size: u64, sha256: &'static str, split: Split, origin: Origin) -> File {
    File { path, size, sha256, split, origin }
}

const fn raw(repo: &'static Repo, path: &'static str) -> Origin {
    Origin::Raw { repo, path }
}

const fn zip(repo: &'static Repo, archive: &'static str, member: &'static str) -> Origin {
    Origin::Zip { repo, archive, member }
}

const fn gunzip(of: &'static str) -> Origin {
    Origin::Gunzip { of }
}

// The tables below were written from ../shared/data (sizes, sha256) and the source
// repositories' trees at the pinned commits (paths); tests/data_fetch.rs checks them against
// ../shared/data.

const TATOEBA: &[File] = &[
    f(
        "tatoeba/README.md",
        1226,
        "5fbce42e75e8f2200dd36ed90279aa10a06ed6db2e34a7fef7f55e99c53af467",
        Notice,
        raw(&LASER, "data/tatoeba/v1/README.md"),
    ),
    f(
        "tatoeba/tatoeba.ang-eng.ang",
        7989,
        "f489d684ff088a0d0d39aef37c442fd2e654c0b1ec82e26e52967f9d25a4f38d",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ang-eng.ang"),
    ),
    f(
        "tatoeba/tatoeba.ang-eng.eng",
        7191,
        "b5c9ac7e664dd2b0c8c27d02998df34a0302a79c672b43dc01313e94435d173f",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ang-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.ara-eng.ara",
        43582,
        "e67a0ae072b79cd9e8eb09f166c3bc0b23488d39f5720f2ee0a8350ae17b719f",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ara-eng.ara"),
    ),
    f(
        "tatoeba/tatoeba.ara-eng.eng",
        29068,
        "3c11838c963f598a52dcf2f452b666353538257001db5c59c3a5f54a999b336b",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ara-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.arq-eng.arq",
        45583,
        "cf0b5fc39a19e328f2b491e9458667756a95184aa6f04535d544fd6f7748f16d",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.arq-eng.arq"),
    ),
    f(
        "tatoeba/tatoeba.arq-eng.eng",
        31811,
        "207118ea873a514901f3efa70d904cc1936b6d5cf355bca4a78b3de8b4fbc816",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.arq-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.arz-eng.arz",
        18076,
        "49e2a2a33eda3b0fe46f073880b17f2d6f1dac24b59386a82ae3567d6cca56da",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.arz-eng.arz"),
    ),
    f(
        "tatoeba/tatoeba.arz-eng.eng",
        13402,
        "08b5b66d6b0f76572cca7aa8895adafcf169f1a3d3ee096320c6c6a0e42dc3ae",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.arz-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.ast-eng.ast",
        4662,
        "6e2106cdff0105dc4385129d98cc64074272e00ea68f130417e8d0fde87b01ba",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ast-eng.ast"),
    ),
    f(
        "tatoeba/tatoeba.ast-eng.eng",
        4621,
        "a2ee8eefb796fae9ae2f3ec9407684a41f3df08794eb72a0c1cbdedf93be4796",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ast-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.awa-eng.awa",
        11307,
        "c9c7fcb5a3f2efec0ff7f1729567c0a4d407d9354bfc3afa90f1ec590677a719",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.awa-eng.awa"),
    ),
    f(
        "tatoeba/tatoeba.awa-eng.eng",
        4970,
        "d9898a996db3edd7554f8bb3f6f771e608814eaa7d899d10303e6828d2a81912",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.awa-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.aze-eng.aze",
        31763,
        "b0daccaaebeaa60ad24dcf42597a93afd238d8c263618db7c5ed6babe7d663e6",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.aze-eng.aze"),
    ),
    f(
        "tatoeba/tatoeba.aze-eng.eng",
        27637,
        "7c428a247940252ddf75ee6de0172dc1cb6df922e7382412fc330590084c20a9",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.aze-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.bel-eng.bel",
        61876,
        "f474ca183685978017e7fb7ee71a018c15b2d64c988c27093c73f9fb24e653b6",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.bel-eng.bel"),
    ),
    f(
        "tatoeba/tatoeba.bel-eng.eng",
        36056,
        "e34d5dffdc15cb276aeecc5463ab7ab78dc1be86d9024b13133cd520979a1ea6",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.bel-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.ben-eng.ben",
        65990,
        "ac3385695d6a6c7e5d18e38ad4b8b7d3780f3df23dd0ff3f539071b8269a8613",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ben-eng.ben"),
    ),
    f(
        "tatoeba/tatoeba.ben-eng.eng",
        25713,
        "67fbe75fec549d436c3356b6d6f8dd53179b6a908661b5d507d28c7fee83350e",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ben-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.ber-eng.ber",
        33513,
        "cfa3f8751c0944ab9b2a1420918b04fcf8857128bfeae8fe7e7e8f4fc55ac7f0",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ber-eng.ber"),
    ),
    f(
        "tatoeba/tatoeba.ber-eng.eng",
        30114,
        "70d5d8d83c199592558ae6df3462ed8c69ae4c63c74b9bab33e02708395a9b5e",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ber-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.bos-eng.bos",
        8716,
        "66f1cf9d092598419973754da7de54c215b816803536687c44781e2db83936bb",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.bos-eng.bos"),
    ),
    f(
        "tatoeba/tatoeba.bos-eng.eng",
        9004,
        "cabfe870a406cad383d13f927ab1595a96a51b76b1213f5ba2b93628d5e1346a",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.bos-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.bul-eng.bul",
        65500,
        "f9fa90cf3599d8c87f7a6ed22f5d648e3ce6687c705656a8c8ea088d891f79d5",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.bul-eng.bul"),
    ),
    f(
        "tatoeba/tatoeba.bul-eng.eng",
        36779,
        "4b03b3b52ffb7cf4286e0c4453c90910a3021546f160bdf0e4d39d1f45bfbc0b",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.bul-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.cat-eng.cat",
        37589,
        "512c42703dc6ff6c98ff1456c7a9d54d6eb4be4f4b4bf441fa27ca1dd30ecc55",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.cat-eng.cat"),
    ),
    f(
        "tatoeba/tatoeba.cat-eng.eng",
        36226,
        "84cce1bb2e1feb81b3d50a3cc7199a2e94517d16f3091ef5d94b1d079ce3a61d",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.cat-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.cbk-eng.cbk",
        33549,
        "912143ae56184420e5c158e93c2caaf0056c2ffaf1e7cf85dce0b5d1c7015def",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.cbk-eng.cbk"),
    ),
    f(
        "tatoeba/tatoeba.cbk-eng.eng",
        29177,
        "ef6d617bd806906d159e01fd3f884c64301add61032727351ab39621c27497de",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.cbk-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.ces-eng.ces",
        32284,
        "0ca1f07a72f547df79288f0c6a1642176009d0b878a75534ed018fe715946f6b",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ces-eng.ces"),
    ),
    f(
        "tatoeba/tatoeba.ces-eng.eng",
        32112,
        "ac195f54f697faaae84e9ea3e395c5c20c46d5b5bf97f4a9840fdfd2a6b183f0",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ces-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.cha-eng.cha",
        5676,
        "235129c1e28ae24d9ab582e5e25376572244cb15f46a1b886b262efaab54c36c",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.cha-eng.cha"),
    ),
    f(
        "tatoeba/tatoeba.cha-eng.eng",
        5540,
        "0e5d75335a30f85833558c24fd11538b98eecd7d94e865d9e1a87845c3bb7a11",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.cha-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.cmn-eng.cmn",
        33410,
        "965d033966fcd186c89741ad49ab4b0a0b2bbd33e02666635ff3b2be23c1ac1f",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.cmn-eng.cmn"),
    ),
    f(
        "tatoeba/tatoeba.cmn-eng.eng",
        35521,
        "29ba36232488f5806aceccac57c59c5e750ddd08edb40eef417e3ada9ff9a239",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.cmn-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.cor-eng.cor",
        23059,
        "ffbbe24eabf47eb2b222c2352eb4ea12fd9e02aa4f137aacc6f087f30a78f76f",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.cor-eng.cor"),
    ),
    f(
        "tatoeba/tatoeba.cor-eng.eng",
        21790,
        "8375121e5b98cbe867bdb1c12f2ce6e6764e7b789c2837489c0bab0ba6a9c776",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.cor-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.csb-eng.csb",
        9199,
        "65348b9235480a70bba9a91c6b131149654b5589b0cab107d287a1c3b46d5662",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.csb-eng.csb"),
    ),
    f(
        "tatoeba/tatoeba.csb-eng.eng",
        7988,
        "89260657ab4b2249d21a944ba83641933ff79be910fa86351bcd2026defbc8cc",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.csb-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.dan-eng.dan",
        35944,
        "8d8b3c0d8156532ca81a11e5e12c7782e6beb9e29db3f40e46ddcf963dcae650",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.dan-eng.dan"),
    ),
    f(
        "tatoeba/tatoeba.dan-eng.eng",
        34882,
        "5fee23e7bf54881082ce98d1b68b885566f45fa5ecce65f4611ca79412deeae7",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.dan-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.deu-eng.deu",
        57121,
        "edfa6f75a42554df388f45891735d5e4214158a99def4b73b5908af4a3054551",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.deu-eng.deu"),
    ),
    f(
        "tatoeba/tatoeba.deu-eng.eng",
        48446,
        "eb9cc83a42f2c4b22f310d05311207e41abb56c2a084666cac3ee0f84d2d0b84",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.deu-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.dsb-eng.dsb",
        14715,
        "cb328fa5948d7d9394fbf3695fb7d0dfd12ce3f21082741fb9010923b0ada8f7",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.dsb-eng.dsb"),
    ),
    f(
        "tatoeba/tatoeba.dsb-eng.eng",
        13964,
        "3aa1d341d875496f36a6f270cef8fe185c2ecbeefe568d0b9e5a099fb2629db9",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.dsb-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.dtp-eng.dtp",
        34919,
        "d61a4559f6a0d251220a968e82697a36276cabee8c315c0b6f5aac72624a532d",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.dtp-eng.dtp"),
    ),
    f(
        "tatoeba/tatoeba.dtp-eng.eng",
        30145,
        "1ada19a5e424e334b43e5748cbc96f81c85803959cff5fcdc695914020a5b90a",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.dtp-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.ell-eng.ell",
        52202,
        "4fb3d3d30bdafd15100dfad5c4680f8f2ed5ca87ed0a6122e2fe2aa21fee65e8",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ell-eng.ell"),
    ),
    f(
        "tatoeba/tatoeba.ell-eng.eng",
        26759,
        "1f630710e718e2f85a4e757d3c7f3d6e78ded0b25c99653b4c552138318d9ffe",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ell-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.est-eng.eng",
        29732,
        "bb033b10596178452aecf2d97ad25580251375e7d224d8b38dad3d93d69b1e4f",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.est-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.est-eng.est",
        29996,
        "94856999ef35e5357502d7ecf50419d0108b99270e507d9c57f8b283bd1be9c5",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.est-eng.est"),
    ),
    f(
        "tatoeba/tatoeba.fao-eng.eng",
        7774,
        "5481a99b039b43ca87a7986294f4501a78b321b4e43c8c13d4f49342fa016bb9",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.fao-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.fao-eng.fao",
        8614,
        "299abb1658b865ae6518f88f10ced23c13b3dc5063118899c457ab4e38d0829d",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.fao-eng.fao"),
    ),
    f(
        "tatoeba/tatoeba.fin-eng.eng",
        35812,
        "322e610359f4d24852e673bbe4524d52c26dbf980aca0760e95c66dc21ecd504",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.fin-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.fin-eng.fin",
        39857,
        "8db3c734f755d578445947f1182f40faf2a9a0eca37561dd248717c088802d60",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.fin-eng.fin"),
    ),
    f(
        "tatoeba/tatoeba.fra-eng.eng",
        36291,
        "5634220f8a26a9a23b84753a9aec0b0832e6bdaa9da3f83e0bd84c928c3f46e3",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.fra-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.fra-eng.fra",
        43727,
        "644172ff9642fefa9e41c29b7d6f44196518e84350dc44d4992e943c0cca92b6",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.fra-eng.fra"),
    ),
    f(
        "tatoeba/tatoeba.fry-eng.eng",
        6098,
        "222ef1b50e42d6bc3a04c5e68a385969a205ad7d2f81a5a5def67572153a64f8",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.fry-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.fry-eng.fry",
        6137,
        "2fc95443e777f6a8866241f024ac43e79ed07aa1e782a3efb13a66fc3d7866d8",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.fry-eng.fry"),
    ),
    f(
        "tatoeba/tatoeba.glg-eng.eng",
        37853,
        "509066bbb1631f8ac0c261bab6c340ccaf54e60cc88a07259543f0fa0ec439a6",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.glg-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.glg-eng.glg",
        38723,
        "b165fd7ca25343381c63a2f0caf06df57f12797e818e550a2bbcb7928cae7d4a",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.glg-eng.glg"),
    ),
    f(
        "tatoeba/tatoeba.gsw-eng.eng",
        2302,
        "dafa199e25bfbc0f5d6ca5b514753f9d3de9353b1979d54184ee6a93877edca7",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.gsw-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.gsw-eng.gsw",
        2403,
        "6007a6e277321ea9ed1f1cf50048c6e28d4817dc004ac881e857c42e132679b2",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.gsw-eng.gsw"),
    ),
    f(
        "tatoeba/tatoeba.heb-eng.eng",
        35840,
        "73c27ed0f76c1d2da199230f05489749e10bb67ab879c6dfee8ca9807d6bd99c",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.heb-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.heb-eng.heb",
        47660,
        "4a07ca4b8a6fb7ab499791573a2454730f47acbe209359d7b9372a9f6094a102",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.heb-eng.heb"),
    ),
    f(
        "tatoeba/tatoeba.hin-eng.eng",
        34090,
        "adfce2269a55dbac69b25c0f4f6eb89e0f9383165485925a2e042e61b9480562",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.hin-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.hin-eng.hin",
        88468,
        "15e4fb0a394be4438319f1d6955d1aea226e2a8c5ad38798b23b76ae43d742ed",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.hin-eng.hin"),
    ),
    f(
        "tatoeba/tatoeba.hrv-eng.eng",
        33075,
        "e937275feb38147918190ba2c294f31c18b77df9d3450dce245e33a57fdc94b6",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.hrv-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.hrv-eng.hrv",
        31859,
        "be6bb15973e3c8ebd23584e8867bc5182b390403575d62c78d6c42b5e7b92fcf",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.hrv-eng.hrv"),
    ),
    f(
        "tatoeba/tatoeba.hsb-eng.eng",
        14204,
        "9bc9399674d901253186bdc542c6c7a798b55fd76e61950f3e93a709e00d9ccc",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.hsb-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.hsb-eng.hsb",
        14437,
        "05ddb2c8866c51091955609b8ec60da073c9e94ba948f8d2d9320e8403bef52f",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.hsb-eng.hsb"),
    ),
    f(
        "tatoeba/tatoeba.hun-eng.eng",
        33554,
        "5323266e91ddee67ed1ae00d6bbac0cdf3d37749d1b2da3459bf0d424bc71383",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.hun-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.hun-eng.hun",
        35335,
        "56bd0682be8c1db6568313650b3310d641cc8d0019d12dd7caf201302350eeac",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.hun-eng.hun"),
    ),
    f(
        "tatoeba/tatoeba.hye-eng.eng",
        24018,
        "f95ae935c26ab7abf946cada0558ab445a902b87e3dba6979bf624f7480b0d87",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.hye-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.hye-eng.hye",
        44668,
        "5030d8ad769e6fd15612a9a6af7be51ae9d6c262820c1d6734bfe53b883ae9f2",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.hye-eng.hye"),
    ),
    f(
        "tatoeba/tatoeba.ido-eng.eng",
        33152,
        "d16dc2e53deeaa0f697395a66d27fe20846e999c1545fbc742c6ce512c3fa6c7",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ido-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.ido-eng.ido",
        32781,
        "6751b92a655f6324894efd667e9f1736fc31a5b9459e54af77e10d22df23810d",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ido-eng.ido"),
    ),
    f(
        "tatoeba/tatoeba.ile-eng.eng",
        25308,
        "5743127146b2cc8b07a283d8ae9b504fff0dc04b86d03690883fb8f60bbc9e7f",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ile-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.ile-eng.ile",
        25372,
        "a5e4f9304110c7b9eda5833e1801f1563bdcd042e56a6e9fa3f84b0553bbb397",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ile-eng.ile"),
    ),
    f(
        "tatoeba/tatoeba.ina-eng.eng",
        41683,
        "a71b750144c5a6e6c199c4fb97f452628b4f6263b65aa44bab7a8f20fb6f83c5",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ina-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.ina-eng.ina",
        45819,
        "f4f5952c0b009dafe02ac4b393bd21c250b6662f2e6ebe9f3a6e4589c07746ca",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ina-eng.ina"),
    ),
    f(
        "tatoeba/tatoeba.ind-eng.eng",
        34875,
        "62a3f5127b60eb3526b8fa3994a68fa1a1f114f3a395307a8808a3517c05ffc5",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ind-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.ind-eng.ind",
        39969,
        "4f03cd70cba071f746eacd3ebf6b60fd5a8377ce18b4cc52edec6721f05f352a",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ind-eng.ind"),
    ),
    f(
        "tatoeba/tatoeba.ita-eng.eng",
        31596,
        "738bf8f981e42d285f4f08bc09238782d285b02050e6e95287aa4e998bb7b24b",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ita-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.ita-eng.ita",
        34237,
        "9b3f369d0ed92273b46dd3b983721636e3d15024ce7125f5103229249c386d26",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ita-eng.ita"),
    ),
    f(
        "tatoeba/tatoeba.jpn-eng.eng",
        39239,
        "b42129b34e1bf225ccc25fc00e532a6113af98adbc6605b93021bd8aadeb68b6",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.jpn-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.jpn-eng.jpn",
        53844,
        "56040bd6949170a631039d9f8f4c6440db8761b0065c9686feba55c99a320d46",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.jpn-eng.jpn"),
    ),
    f(
        "tatoeba/tatoeba.kab-eng.eng",
        30267,
        "f4e9d9e6d6e3eba1b05a22fde860229a8fb57178d2920a844b1220264a552769",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.kab-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.kab-eng.kab",
        32459,
        "a912470ad96c83615509e98716bd6665413a7936fa54ae6e867b78a800f9574f",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.kab-eng.kab"),
    ),
    f(
        "tatoeba/tatoeba.kaz-eng.eng",
        17491,
        "0ab684e7032c6520540d5785adf00ef206d097221d0dd4dc9bcaabd64068e10d",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.kaz-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.kaz-eng.kaz",
        29687,
        "f20c682582a80b6aa10f3b933db93bc314449b554ce611e263bc75990b319aef",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.kaz-eng.kaz"),
    ),
    f(
        "tatoeba/tatoeba.kor-eng.eng",
        35085,
        "f900cf3c9b72ed5a400e1804702863ff3df00be58eb060902e02285d0e68fab3",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.kor-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.kor-eng.kor",
        44054,
        "e550c84184ec35b1a0dab3154284719511a21746e53c40f46eb6ab08179e9188",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.kor-eng.kor"),
    ),
    f(
        "tatoeba/tatoeba.kur-eng.eng",
        12488,
        "7cec4358a4efaa87c9bba661b0a4bed5c0425ac0cf81359e16aaf9d9214a0ec8",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.kur-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.kur-eng.kur",
        13089,
        "478b0fd516eb779a93476ac844d822c19fe208dff23231de0986ffe94bd3699a",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.kur-eng.kur"),
    ),
    f(
        "tatoeba/tatoeba.kzj-eng.eng",
        34027,
        "23d41e6211b283f4bd3a8a273164daa66aed2276f947716fe28327cabda215ef",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.kzj-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.kzj-eng.kzj",
        39282,
        "94eaec42d55cdd0ecb4be21bfe5444b4f8b9610a14faeeefb3ffc97de802d1f8",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.kzj-eng.kzj"),
    ),
    f(
        "tatoeba/tatoeba.lfn-eng.eng",
        32295,
        "de3b206d5dc1e207e9d6613636adde5a830b82b0957fa6e53160a30e54142182",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.lfn-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.lfn-eng.lfn",
        39195,
        "df11cbb84fc0c7da037676ecad3945a6356d4bef0b99e0b6c5e0e8ed402d6ac4",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.lfn-eng.lfn"),
    ),
    f(
        "tatoeba/tatoeba.lit-eng.eng",
        31864,
        "5dfc3ef9437f0a8495f39249a1010237e7503ca6803fd6e73a2621b5165b79cc",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.lit-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.lit-eng.lit",
        33379,
        "1fa3d054d66dae6ffa69e5d23e1860f17d6c32cee4bdc4c2eafe9b3c4a37a481",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.lit-eng.lit"),
    ),
    f(
        "tatoeba/tatoeba.lvs-eng.eng",
        30270,
        "c380ec2f70065ff30fb1fc33ac2cb4f26c312e03ed289248d4198a838bf39964",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.lvs-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.lvs-eng.lvs",
        32936,
        "04032a8c22640a773e7ea482eab1ddde76952ed17df6c6bf172204a8ec91612e",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.lvs-eng.lvs"),
    ),
    f(
        "tatoeba/tatoeba.mal-eng.eng",
        21765,
        "4d80cdbb844cd4e33f874e5dc45c1cdda4f80998034448f7eb56b8b6532a6622",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.mal-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.mal-eng.mal",
        72952,
        "1a896f54f85a454fb0123864049c65921ae9dfd0cafda6deef8060f0104d965e",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.mal-eng.mal"),
    ),
    f(
        "tatoeba/tatoeba.mar-eng.eng",
        27890,
        "709d09b697dca053c814b9d525b72cb47cb011aa860c6598f3e2b1b3dd1280dd",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.mar-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.mar-eng.mar",
        72652,
        "b2931584fbe62062beb97cc939e4d208ace5ee56f15808860ab14e130fd3c576",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.mar-eng.mar"),
    ),
    f(
        "tatoeba/tatoeba.max-eng.eng",
        8213,
        "7b8ca880b1b9920a9f1dccaf1dda41b50983a004d6b19a896e58de2d36a75064",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.max-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.max-eng.max",
        9461,
        "1b76deb555867c7f81715d926301a10e2ea8fd08afc259ec087b9208ba2b8f32",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.max-eng.max"),
    ),
    f(
        "tatoeba/tatoeba.mhr-eng.eng",
        30840,
        "ee054454943169b7eebfc7d900d1de21a6dd5b268789f8ffe0d3c217e64c7a64",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.mhr-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.mhr-eng.mhr",
        54264,
        "a882b273da472c4ac7f1123897283a45868d05f4e8e909bb149654e733d2a269",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.mhr-eng.mhr"),
    ),
    f(
        "tatoeba/tatoeba.mkd-eng.eng",
        30512,
        "0f6275c29c993ab1d6f78d0ae4978f9e765a1aad150ecb1f86f6ac50fa7e2641",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.mkd-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.mkd-eng.mkd",
        53314,
        "8dde3dc54e5bfda50d8a8a95a96b9841bb512b7f7f76a5e611c814a594c4e3ee",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.mkd-eng.mkd"),
    ),
    f(
        "tatoeba/tatoeba.mon-eng.eng",
        15716,
        "f8a75164467fec93df5ac46687385029f760002aa2075df9167e8533fa883295",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.mon-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.mon-eng.mon",
        28812,
        "559722662c36ba75caee0e6eb8e84e8f0c121a0ceea630804e55e8cd054fc184",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.mon-eng.mon"),
    ),
    f(
        "tatoeba/tatoeba.nds-eng.eng",
        30549,
        "5c34dfa60d159f397994b5a28d9d6f231e2fd34143d5738133d951fe72005b3a",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.nds-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.nds-eng.nds",
        32909,
        "87742c2dd6dc1761f3aa397b454e18a9ae3681512a239a66221c994b32ebc100",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.nds-eng.nds"),
    ),
    f(
        "tatoeba/tatoeba.nld-eng.eng",
        35397,
        "3b8836749df573a53235b85ed6771f31bf2de428f520d2d6a1dd94b61b4ef057",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.nld-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.nld-eng.nld",
        37866,
        "d564d4ce1c621ccaefdbe9f5cb08eacccc7bf2a0b58666303e84ca9c7973bdb7",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.nld-eng.nld"),
    ),
    f(
        "tatoeba/tatoeba.nno-eng.eng",
        34294,
        "30a795ce448d6a18ad0378fd832f395e79e1a6427fec9c1b2fd470710368cd23",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.nno-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.nno-eng.nno",
        34278,
        "5a1c185fe5e5626422ede3584a59afc64e0979285b144b1f89e8b4f82d04a850",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.nno-eng.nno"),
    ),
    f(
        "tatoeba/tatoeba.nob-eng.eng",
        34016,
        "deedb3cebc89b59cff711966af077f941555f37782364a36716229ed1c4a7ebe",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.nob-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.nob-eng.nob",
        34465,
        "0b67d741b2af35897ecd9d7370f8ddb9de115fe18fdd1357321d426eca2bc229",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.nob-eng.nob"),
    ),
    f(
        "tatoeba/tatoeba.nov-eng.eng",
        6816,
        "7f3a5abd333843b8b47d11a56f13ddf983fb71419d84ce08b6092bf6a2c07926",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.nov-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.nov-eng.nov",
        6900,
        "8877783074fea036066811e291d37974817af078ba295ef1e9a74a448b4d79f1",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.nov-eng.nov"),
    ),
    f(
        "tatoeba/tatoeba.oci-eng.eng",
        29602,
        "a8b7e855fbcee46763922eeea7ddfe5100804b2d6cd064bcf3c7a34767939c7a",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.oci-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.oci-eng.oci",
        32150,
        "2b21da72dbe09a642fb6729b77f2f9e4184ddb0fd3e6ce649ea46419e7a39db9",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.oci-eng.oci"),
    ),
    f(
        "tatoeba/tatoeba.orv-eng.eng",
        24031,
        "7ebde69cccbf1b696f507e2b4f3b7f609f602e6c4eaa6896b9259b5c6e04d23d",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.orv-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.orv-eng.orv",
        36996,
        "f2e50ada1fcdacfdbc72464c026808701e2e458e323b2416d8e99526e3009ba9",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.orv-eng.orv"),
    ),
    f(
        "tatoeba/tatoeba.pam-eng.eng",
        29776,
        "40b46cdce45d38d849b3212f5fe241d35e89c2a2cd110c7d44ec1c817d3db1ab",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.pam-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.pam-eng.pam",
        33688,
        "1e518a5ce369d9d587c5c850030c0fd2b97248f1cf99ecc2e082de5ac8965986",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.pam-eng.pam"),
    ),
    f(
        "tatoeba/tatoeba.pes-eng.eng",
        34853,
        "b5c6cf8c8d93ff8f2fe26b53f3ee29b62db9c6f7dcddcb086ba48953f4ce926b",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.pes-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.pes-eng.pes",
        58866,
        "f1553713723491fe5876e1060b18fb4abf0c77be3ba06db2e3307e83aedbbb32",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.pes-eng.pes"),
    ),
    f(
        "tatoeba/tatoeba.pms-eng.eng",
        18090,
        "e9e88117fda8c06e2505aa776d8fb4b6b98139253b99228f08e0fc5317ce02ee",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.pms-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.pms-eng.pms",
        20440,
        "78313c26a46876ec538cdd63cbb3991af66b0e8b861d43802bbde7cc3400f0dd",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.pms-eng.pms"),
    ),
    f(
        "tatoeba/tatoeba.pol-eng.eng",
        34638,
        "d21cca6c6c28a9df7e8ecdc923672311ca3395241b58a5749b34854d6c65df8f",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.pol-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.pol-eng.pol",
        36510,
        "93e1378a66dfc83fcab4cf115f3eaa2635b42648e4746478f83f71cc6291cbfd",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.pol-eng.pol"),
    ),
    f(
        "tatoeba/tatoeba.por-eng.eng",
        35854,
        "deb4568cfb7b7cbbc060a7fe97c4639fb4680842f4fcd28df791ffdbb753855a",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.por-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.por-eng.por",
        39331,
        "b0c926a232c9889a87a1a970f9399c5618c2d95baf204321e9da794c0aec16f5",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.por-eng.por"),
    ),
    f(
        "tatoeba/tatoeba.ron-eng.eng",
        34494,
        "1064c638220dc9de0868baee327e091ae815214674295b62b13448ef442c448d",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ron-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.ron-eng.ron",
        37990,
        "ad5c4a9f4920718203534d1f8271e27021b9af54b2c908dec66851d4dc681fd4",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ron-eng.ron"),
    ),
    f(
        "tatoeba/tatoeba.rus-eng.eng",
        33650,
        "7b26f52d6085b7c4944d6f5f6f5b6e1932085b42112f1444db515ce59e878fb8",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.rus-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.rus-eng.rus",
        58822,
        "446ff2cae66053c2277d9735b2c2df6b786cae258385f7ade7bed68d8835c6a0",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.rus-eng.rus"),
    ),
    f(
        "tatoeba/tatoeba.slk-eng.eng",
        30429,
        "3f2639abbbd80ccd015dcd86c0b1d5a3157e7af29d4c66ff94079bb78dfa7260",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.slk-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.slk-eng.slk",
        30331,
        "7f8c6a3b47f44f03b9c61c9445dc3da13aac07b0f39e2dcfee8f81b30515a46b",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.slk-eng.slk"),
    ),
    f(
        "tatoeba/tatoeba.slv-eng.eng",
        27388,
        "2acd8423aab2b78ef4b125edb17019e380a80059931139a9b2263296e489a4fb",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.slv-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.slv-eng.slv",
        25808,
        "d5da94df8c2dc15c2d32236c16c48da458bd9569fc8009080587f1faf915b0ad",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.slv-eng.slv"),
    ),
    f(
        "tatoeba/tatoeba.spa-eng.eng",
        34776,
        "89e4470f4572040b1ca94b3edad97dcd8bd2f0141f072e12933b8659dadf917d",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.spa-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.spa-eng.spa",
        37490,
        "f9628cea40481e8251f0999718bd893cff0f261752f5e526b3bc20284e2ca018",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.spa-eng.spa"),
    ),
    f(
        "tatoeba/tatoeba.sqi-eng.eng",
        34531,
        "3c6bb4206f56e0727337d60c0afc783ff393d027486b91536f20997ab13799d8",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.sqi-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.sqi-eng.sqi",
        38615,
        "8c21a43c425347993779a79b7ad8caa7c37edb85aa09f7146de4a150deaa1525",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.sqi-eng.sqi"),
    ),
    f(
        "tatoeba/tatoeba.srp-eng.eng",
        33032,
        "1ca4b0be067cdb87e86d83b50590f00fcbc3932e3a1f29f316cc8e8de47e3f62",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.srp-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.srp-eng.srp",
        40083,
        "cf94fd118b84a967eb5acbc1259e19dbf1fe0db5bfe7ae0258ee0a528d7e8209",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.srp-eng.srp"),
    ),
    f(
        "tatoeba/tatoeba.swe-eng.eng",
        30029,
        "50fdff247854beaafdd5726ff6bb634278ea791abc4c68ca6072149da14dbf58",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.swe-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.swe-eng.swe",
        32219,
        "9b2a15609f8c35b054f3b575c4e2a06812fee1c55e3ad96cdd03df85edc9bc9f",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.swe-eng.swe"),
    ),
    f(
        "tatoeba/tatoeba.tam-eng.eng",
        8888,
        "e7c5106acdd100214a161970b2a5c31e7386e5b6a963e3d3afdf30412c90ac53",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.tam-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.tam-eng.tam",
        30553,
        "bde87fb1ddedccf6c7a2b70ffdd19a959a573c113c2e7a041c4b623fb2170bde",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.tam-eng.tam"),
    ),
    f(
        "tatoeba/tatoeba.tat-eng.eng",
        33722,
        "8c74036c1d7095e838c9631d965fbb6a3bb18044827a4e62a0e384bfe230dd48",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.tat-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.tat-eng.tat",
        58824,
        "26bd52530c11448328aa52390daa9c21f8e69ac8381efec7be4fcd60ca152af1",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.tat-eng.tat"),
    ),
    f(
        "tatoeba/tatoeba.tha-eng.eng",
        18439,
        "2881c82d2c5fa59cf0a68bc9e012f5e0b0a716f7357cbecf77c247efc2fd7294",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.tha-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.tha-eng.tha",
        44759,
        "65c7b3c01a56a1ac8971e72e0ea8e74a027718dc84044d8802c0ab36395a3156",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.tha-eng.tha"),
    ),
    f(
        "tatoeba/tatoeba.tuk-eng.eng",
        4584,
        "e9050787bd9d36127fcb65f40f1577307299b07fae3f50f36125d91ac3483d4d",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.tuk-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.tuk-eng.tuk",
        4638,
        "de146697aea59ae38e83bdef4ebfa1e6c5479816f8d91b5de85eee3b7af80e8c",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.tuk-eng.tuk"),
    ),
    f(
        "tatoeba/tatoeba.tur-eng.eng",
        34278,
        "a768df7dd3d1344f872a458b32c3a65e24f8381826ccb16ba6677426176c8121",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.tur-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.tur-eng.tur",
        37607,
        "1ffa0acc006018b3105abda41a4d4ca42f3c122964a49b71793546367b079a86",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.tur-eng.tur"),
    ),
    f(
        "tatoeba/tatoeba.tzl-eng.eng",
        2150,
        "66cdcc25669543143aa0bb5e32fbcb7af32fe9d08faf98f69bcc3dc7452f6059",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.tzl-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.tzl-eng.tzl",
        2093,
        "543d203fc3ab62b34230e4612152d2a8ec268b67c54fdff76028f95ba7a97ef5",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.tzl-eng.tzl"),
    ),
    f(
        "tatoeba/tatoeba.uig-eng.eng",
        32161,
        "186b73449aca11da51c4757c6f98536a11f2ce5ff4d6f460e8d9fd405bc69387",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.uig-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.uig-eng.uig",
        57891,
        "0d69dc4f7bea3b1fd9fb8d95a47885ae1893c7f4b6530afe3f049e1625313c17",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.uig-eng.uig"),
    ),
    f(
        "tatoeba/tatoeba.ukr-eng.eng",
        29851,
        "f0df48c6911ca71b315a5df5a78438bda23129f375fe50dc7ebf6a0f66bd05e0",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ukr-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.ukr-eng.ukr",
        52080,
        "7d11ce1654600e3a3a2a84ce06aff213e22903d9e75f9f5eec09f85ce85abf2a",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.ukr-eng.ukr"),
    ),
    f(
        "tatoeba/tatoeba.urd-eng.eng",
        31893,
        "dab35fda3f73b3fd86b6b9f9f9f6242430961aa5d1ac247adbc646867df79cec",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.urd-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.urd-eng.urd",
        56819,
        "2efc22dc61885a9454aeeee68c8b841c7f9138d53ba644a82308bd210140450b",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.urd-eng.urd"),
    ),
    f(
        "tatoeba/tatoeba.vie-eng.eng",
        38686,
        "a1f60bd8ae6c42224a4c050d2aa1ff4242d14827d64d7831e96ecf2b2c367f5f",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.vie-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.vie-eng.vie",
        52721,
        "6dbb02d778b0bfc8678cd85f87db76de55dd7e409a26fe32ad42d50e0f1fff77",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.vie-eng.vie"),
    ),
    f(
        "tatoeba/tatoeba.wuu-eng.eng",
        38391,
        "576cbe9a76445f06c3a1c18094cb1810a3204ab20ece4fda952f5c13e66c4894",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.wuu-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.wuu-eng.wuu",
        36435,
        "72b3261f8acdcd6d10537e2631621e38ab1d40274c7eaf801651ad5960912b91",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.wuu-eng.wuu"),
    ),
    f(
        "tatoeba/tatoeba.yue-eng.eng",
        38646,
        "a96000ddf71d3717e42333942bf93641d5aca69949b1ce8dbd3e1b4ccdf20617",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.yue-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.yue-eng.yue",
        36440,
        "09c6fb4a35e25bb6d8f717789cd1b60d566adb75159ed2225f10da6c994c89c9",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.yue-eng.yue"),
    ),
    f(
        "tatoeba/tatoeba.zsm-eng.eng",
        36411,
        "ff0d1e56b9a190307dac18a304fbb5000dee96f61629940c11dcb91350231483",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.zsm-eng.eng"),
    ),
    f(
        "tatoeba/tatoeba.zsm-eng.zsm",
        42798,
        "d722747706934536b0a8e6656001fe4434029146940c225ab02a10868f1783f2",
        Test,
        raw(&LASER, "data/tatoeba/v1/tatoeba.zsm-eng.zsm"),
    ),
];

const STS17: &[File] = &[
    f(
        "sts/STS2017.eval.v1.1/LICENSE.txt",
        943,
        "cc776de72fe658fed3e9c07afbdc04f4c8a25c63f17800e5ea46765990d32f58",
        Notice,
        zip(&STS_EVAL, "data/sources/Sts2017.eval.v1.1.zip", "STS2017.eval.v1.1/LICENSE.txt"),
    ),
    f(
        "sts/STS2017.eval.v1.1/README.txt",
        1519,
        "5c3aa707d942277d8b3de7c394312e10e6ca971233ff02e6cdc67ca60069c59e",
        Notice,
        zip(&STS_EVAL, "data/sources/Sts2017.eval.v1.1.zip", "STS2017.eval.v1.1/README.txt"),
    ),
    f(
        "sts/STS2017.eval.v1.1/STS.input.track1.ar-ar.txt",
        30019,
        "a4f24daa03def87b52769b3a5ea9fe5f8b66d2f06db2a6565395cb1575443e3e",
        Test,
        zip(&STS_EVAL, "data/sources/Sts2017.eval.v1.1.zip", "STS2017.eval.v1.1/STS.input.track1.ar-ar.txt"),
    ),
    f(
        "sts/STS2017.eval.v1.1/STS.input.track2.ar-en.txt",
        25968,
        "e70c9546323388411dc57468eae360341746a7fe5501d0e87b28cc386c45f308",
        Test,
        zip(&STS_EVAL, "data/sources/Sts2017.eval.v1.1.zip", "STS2017.eval.v1.1/STS.input.track2.ar-en.txt"),
    ),
    f(
        "sts/STS2017.eval.v1.1/STS.input.track3.es-es.txt",
        26296,
        "9daa6bf43dcd0bb733773b6fc15bd66be799b94e8b56b3ab07f29cefdc39c5d9",
        Test,
        zip(&STS_EVAL, "data/sources/Sts2017.eval.v1.1.zip", "STS2017.eval.v1.1/STS.input.track3.es-es.txt"),
    ),
    f(
        "sts/STS2017.eval.v1.1/STS.input.track4a.es-en.txt",
        23968,
        "312de93aa424c5862dbb0f8d4d83b6389cd08428278961ab2c6c53655428c812",
        Test,
        zip(&STS_EVAL, "data/sources/Sts2017.eval.v1.1.zip", "STS2017.eval.v1.1/STS.input.track4a.es-en.txt"),
    ),
    f(
        "sts/STS2017.eval.v1.1/STS.input.track4b.es-en.txt",
        60862,
        "caadaa457aa5548379d83d36fba9c05a4e0424fabb1ba22bf938a0c66c47eee9",
        Test,
        zip(&STS_EVAL, "data/sources/Sts2017.eval.v1.1.zip", "STS2017.eval.v1.1/STS.input.track4b.es-en.txt"),
    ),
    f(
        "sts/STS2017.eval.v1.1/STS.input.track5.en-en.txt",
        22169,
        "8d493844c1010eb6b5d373e289b8d6ddc003e626bf8495976cc40c0a5f47414c",
        Test,
        zip(&STS_EVAL, "data/sources/Sts2017.eval.v1.1.zip", "STS2017.eval.v1.1/STS.input.track5.en-en.txt"),
    ),
    f(
        "sts/STS2017.eval.v1.1/STS.input.track6.tr-en.txt",
        45317,
        "3054157d3d25b0a15d49b474fd21138efe3e04a70c169e21e3045553d798069f",
        Test,
        zip(&STS_EVAL, "data/sources/Sts2017.eval.v1.1.zip", "STS2017.eval.v1.1/STS.input.track6.tr-en.txt"),
    ),
    f(
        "sts/STS2017.gs/STS.gs.track1.ar-ar.txt",
        2250,
        "4a7ad1eb5219605ab09cd743727c4059acdf55df9ae7351b5df079cc47ae983e",
        Test,
        zip(&STS_EVAL, "data/sources/Sts2017.gs.zip", "STS2017.gs/STS.gs.track1.ar-ar.txt"),
    ),
    f(
        "sts/STS2017.gs/STS.gs.track2.ar-en.txt",
        2250,
        "e37e117a16236be51a0b1fcd71344efb413964acefbc849603e16ec841072e41",
        Test,
        zip(&STS_EVAL, "data/sources/Sts2017.gs.zip", "STS2017.gs/STS.gs.track2.ar-en.txt"),
    ),
    f(
        "sts/STS2017.gs/STS.gs.track3.es-es.txt",
        2250,
        "96f9d7914e31510774b4b696024b4da8f66ac1ed681d2e9895cc622185a5e637",
        Test,
        zip(&STS_EVAL, "data/sources/Sts2017.gs.zip", "STS2017.gs/STS.gs.track3.es-es.txt"),
    ),
    f(
        "sts/STS2017.gs/STS.gs.track4a.es-en.txt",
        2250,
        "043319c5223da878f0300b7674adbae656014d5f55f0f6cab5fcb83b9f2921e6",
        Test,
        zip(&STS_EVAL, "data/sources/Sts2017.gs.zip", "STS2017.gs/STS.gs.track4a.es-en.txt"),
    ),
    f(
        "sts/STS2017.gs/STS.gs.track4b.es-en.txt",
        500,
        "67e226bbd2b0d42b8b4f0e0b677df1740e992aa10dfed56411eb62e1071df95e",
        Test,
        zip(&STS_EVAL, "data/sources/Sts2017.gs.zip", "STS2017.gs/STS.gs.track4b.es-en.txt"),
    ),
    f(
        "sts/STS2017.gs/STS.gs.track5.en-en.txt",
        2250,
        "a767d322cc3e78ff43f3c541a4fc0b9e0e5681f27c20de7eb9095fbb9072cf04",
        Test,
        zip(&STS_EVAL, "data/sources/Sts2017.gs.zip", "STS2017.gs/STS.gs.track5.en-en.txt"),
    ),
    f(
        "sts/STS2017.gs/STS.gs.track6.tr-en.txt",
        2250,
        "f0aceb6d73370462cfe4025778d7a879917b950141b333fc59e5e40c30cb1f4e",
        Test,
        zip(&STS_EVAL, "data/sources/Sts2017.gs.zip", "STS2017.gs/STS.gs.track6.tr-en.txt"),
    ),
    f(
        "sts/STS2017.en-de.txt.gz",
        9726,
        "1eb3c44ffbf940f2ddb2ae525dba36364d5c895bad4957a054a56a49ed4ce71c",
        Test,
        raw(&CYCLE_NLP_GAN, "data/STS2017.en-de.txt.gz"),
    ),
    f(
        "sts/STS2017.en-de.txt",
        23745,
        "a152aaa71a904fb89c2422898b1b0c8d6f45a3eb3431e88a7f509af38c7f7b44",
        Test,
        gunzip("sts/STS2017.en-de.txt.gz"),
    ),
];

const STSB: &[File] = &[
    f(
        "sts/stsbenchmark/LICENSE.txt",
        6641,
        "3dfc3217395f8c5dd05c5f8995f25fe2f8fd258e6dd770b3de480749caee8c70",
        Notice,
        raw(&STS_EVAL, "data/stsbenchmark/LICENSE.txt"),
    ),
    f(
        "sts/stsbenchmark/readme.txt",
        5994,
        "e9488363d211c32ca5e912954f16eb9233cfed1b5b4b0475d0d812d35d7c8ef1",
        Notice,
        raw(&STS_EVAL, "data/stsbenchmark/readme.txt"),
    ),
    f(
        "sts/stsbenchmark/sts-dev.csv",
        255680,
        "5d7e944d8b02734b07bfdb5df67db3420c64bed153fcaa1ba47ad03480cf4234",
        Dev,
        raw(&STS_EVAL, "data/stsbenchmark/sts-dev.csv"),
    ),
    f(
        "sts/stsbenchmark/sts-test.csv",
        282419,
        "affe45928a66ee5a708531233c95b7dacbbdc57f974f002a3d32ea0180cf816a",
        Test,
        raw(&STS_EVAL, "data/stsbenchmark/sts-test.csv"),
    ),
    f(
        "sts/stsbenchmark/sts-train.csv",
        901177,
        "0f71910b59aa1ad973c5897f0791f3b0965a92b8f82b1a95f3eea9f4162fda82",
        Train,
        raw(&STS_EVAL, "data/stsbenchmark/sts-train.csv"),
    ),
];

const BUCC: &[File] = &[
    f(
        "bucc/zh-en.dev.en",
        1570852,
        "b934ea6de5212e3ffe74cbf426c3fc2798d307fb478a7d539000748ac77ac763",
        Test,
        raw(&FEW_SHOTS, "data/bucc2018/zh-en.dev.en"),
    ),
    f(
        "bucc/zh-en.dev.gold",
        6682,
        "4954bb122822d40d1fee115f34db1741035b2eb1e6d3e39a5b7cfc5192482dae",
        Test,
        raw(&FEW_SHOTS, "data/bucc2018/zh-en.dev.gold"),
    ),
    f(
        "bucc/zh-en.dev.zh",
        970254,
        "65771cc09c920e88249c1970f294400198e6928c5ef71ea4cf47dd316a93ace5",
        Test,
        raw(&FEW_SHOTS, "data/bucc2018/zh-en.dev.zh"),
    ),
];

const XNLI: &[File] = &[
    f(
        "xnli/dev-ar.tsv",
        628017,
        "234237be8250fbdf4eafeae06f7d65f33ae02fc6a9c502f2fa67fb7c1ed0aaa6",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-ar.tsv"),
    ),
    f(
        "xnli/dev-bg.tsv",
        769081,
        "1137999816dc8c7f0fbfa16f5542d4c38bc8018d9c03bab1cb14a7db69753a27",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-bg.tsv"),
    ),
    f(
        "xnli/dev-de.tsv",
        489623,
        "cc72840e5daa08a8f2f7bf780de1d8a81ad035ac21cb8308e3a66f0c48342838",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-de.tsv"),
    ),
    f(
        "xnli/dev-el.tsv",
        836245,
        "ad9730e84ef2943d20ab96f31a5b62812fa19744cc4494498ea8deea3a288950",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-el.tsv"),
    ),
    f(
        "xnli/dev-en.tsv",
        428483,
        "7e7ac6fe0b84ce13517710e2c3edfc9371076059f44ff6e1090e6eb82439a8b2",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-en.tsv"),
    ),
    f(
        "xnli/dev-es.tsv",
        473442,
        "eadee2bff6f31f9b271cb4668351ec089301ec258a4138367679faa5c3495da6",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-es.tsv"),
    ),
    f(
        "xnli/dev-fr.tsv",
        505115,
        "58db1c233ec2833542cc6671255e688b1db44238f33f7080919910da6b6b4e5b",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-fr.tsv"),
    ),
    f(
        "xnli/dev-hi.tsv",
        1018934,
        "911c4dc546d50642a62e2363f18598988feb56e885f28e1052314788a7a41ac7",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-hi.tsv"),
    ),
    f(
        "xnli/dev-ru.tsv",
        781459,
        "fcc3ac697104165aca0355fdf850c079adec3de67dd7ba689ffc79314ea6d42e",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-ru.tsv"),
    ),
    f(
        "xnli/dev-sw.tsv",
        424869,
        "f81755c66d97564cbc70598cb006f63baaf8e6156de18f89ff9fe86f154f8cfa",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-sw.tsv"),
    ),
    f(
        "xnli/dev-th.tsv",
        1056179,
        "8632d6380c0a440ad16788dedde1b832b7fbedc6ae161fff4613830c00dccace",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-th.tsv"),
    ),
    f(
        "xnli/dev-tr.tsv",
        454328,
        "f94f63d8ef4fcf78d2a90df3682a54b52ace625caaf8fae4436e2137da184696",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-tr.tsv"),
    ),
    f(
        "xnli/dev-ur.tsv",
        694972,
        "ebd30b594a2c5e33e5d99117a5090dbc9b96bc8cab4c8c50eeb51baf5278ffac",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-ur.tsv"),
    ),
    f(
        "xnli/dev-vi.tsv",
        585699,
        "8cb3648cacceb056fda51313560d50ed2e7567c55493d5e16158a93245db84be",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-vi.tsv"),
    ),
    f(
        "xnli/dev-zh.tsv",
        379871,
        "9a1e2df22ad00831698698da699fcdcd4e4c72192e6d8b5feed3126dbb287873",
        Train,
        raw(&FEW_SHOTS, "data/xnli/dev-zh.tsv"),
    ),
    f(
        "xnli/test-ar.tsv",
        1229420,
        "e84b8f7eb400c889f1494d7ff31213246efbd917a4cedf4f812564b1f464773b",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-ar.tsv"),
    ),
    f(
        "xnli/test-bg.tsv",
        1507904,
        "de2afe01ab671d43da319b22395492b3124bfb2f34532cd20b8cd0d80e16908e",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-bg.tsv"),
    ),
    f(
        "xnli/test-de.tsv",
        931349,
        "abf271b89faf13653f33d7bbf020a3aa51242650394ee01935671118f3a8fd88",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-de.tsv"),
    ),
    f(
        "xnli/test-el.tsv",
        1639655,
        "477cd75d9b889449e4d1fdda24dc1d383b3614354e77494ada5cb7eccb85e2e7",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-el.tsv"),
    ),
    f(
        "xnli/test-en.tsv",
        810002,
        "2436b130c9bdb6937411f64a8643c27ca607e6d9230c0ea4525e48c8ae1996a3",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-en.tsv"),
    ),
    f(
        "xnli/test-es.tsv",
        904683,
        "f9beef77275247406cdc88b4104aac23e6894d2f2e0c6a623b31b6191413b855",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-es.tsv"),
    ),
    f(
        "xnli/test-fr.tsv",
        964108,
        "5a54bb8d8ec9733992719a423d6a698f3bc7ada248c9acd1334263eedc37e7d0",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-fr.tsv"),
    ),
    f(
        "xnli/test-hi.tsv",
        2007936,
        "154b58b8c613e8857d3d7f801e70791b9cc917c852a51733a71484a08b366060",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-hi.tsv"),
    ),
    f(
        "xnli/test-ru.tsv",
        1538336,
        "1f538b1bebd3eb159ec650c12a9142a0387ce34105191f0da82e3137ffad3ab1",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-ru.tsv"),
    ),
    f(
        "xnli/test-sw.tsv",
        806521,
        "0eca243e3612180544fdadb0987400ce71c1d5d1a6352f2a691eced21e632e59",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-sw.tsv"),
    ),
    f(
        "xnli/test-th.tsv",
        2081885,
        "94a7fa97e6ccdf17a6e2f94b27a85a0b24dee1e6191120917465ec5767b07613",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-th.tsv"),
    ),
    f(
        "xnli/test-tr.tsv",
        869804,
        "43dacefb3a82278c4c70995309fd64afb35af398a40feeb3e1d978bc4a8fec87",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-tr.tsv"),
    ),
    f(
        "xnli/test-ur.tsv",
        1351104,
        "62800077a401fc0766e816a88d25582be11869960e74ef419c5c5ac991e8d5db",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-ur.tsv"),
    ),
    f(
        "xnli/test-vi.tsv",
        1125084,
        "47a083d2ce760179cfbbfe572656174262a8b84e6a5002da977f62a0a4ff8d3e",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-vi.tsv"),
    ),
    f(
        "xnli/test-zh.tsv",
        712784,
        "befc9b2e4bf9ee39936b9cefa1062004e5c9708b06e0bf8fefd802c2190cae4f",
        Train,
        raw(&FEW_SHOTS, "data/xnli/test-zh.tsv"),
    ),
    f(
        "parallel/xnli-en-de.txt.gz",
        549428,
        "d55ea2bf2beb6a16c1e61f6544d5ac6cf2e91ddf5ffa5ef426b9a797c702feff",
        Train,
        raw(&CYCLE_NLP_GAN, "data/xnli-en-de.txt.gz"),
    ),
];

const MULTI30K: &[File] = &[
    f(
        "parallel/multi30k/test_2016_flickr.cs.gz",
        22572,
        "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
        Test,
        raw(&MULTI30K_REPO, "data/task1/raw/test_2016_flickr.cs.gz"),
    ),
    f(
        "parallel/multi30k/test_2016_flickr.de.gz",
        22890,
        "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
        Test,
        raw(&MULTI30K_REPO, "data/task1/raw/test_2016_flickr.de.gz"),
    ),
    f(
        "parallel/multi30k/test_2016_flickr.en.gz",
        21077,
        "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
        Test,
        raw(&MULTI30K_REPO, "data/task1/raw/test_2016_flickr.en.gz"),
    ),
    f(
        "parallel/multi30k/test_2016_flickr.fr.gz",
        22310,
        "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
        Test,
        raw(&MULTI30K_REPO, "data/task1/raw/test_2016_flickr.fr.gz"),
    ),
    f(
        "parallel/multi30k/test_2017_flickr.de.gz",
        21471,
        "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
        Test,
        raw(&MULTI30K_REPO, "data/task1/raw/test_2017_flickr.de.gz"),
    ),
    f(
        "parallel/multi30k/test_2017_flickr.en.gz",
        19138,
        "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
        Test,
        raw(&MULTI30K_REPO, "data/task1/raw/test_2017_flickr.en.gz"),
    ),
    f(
        "parallel/multi30k/test_2017_flickr.fr.gz",
        20434,
        "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
        Test,
        raw(&MULTI30K_REPO, "data/task1/raw/test_2017_flickr.fr.gz"),
    ),
    f(
        "parallel/multi30k/test_2017_mscoco.de.gz",
        10230,
        "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
        Test,
        raw(&MULTI30K_REPO, "data/task1/raw/test_2017_mscoco.de.gz"),
    ),
    f(
        "parallel/multi30k/test_2017_mscoco.en.gz",
        8844,
        "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
        Test,
        raw(&MULTI30K_REPO, "data/task1/raw/test_2017_mscoco.en.gz"),
    ),
    f(
        "parallel/multi30k/test_2017_mscoco.fr.gz",
        9751,
        "754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0",
        Test,
        raw(&MULTI30K_REPO, "data/task1/raw/test_2017_mscoco.fr.gz"),
    ),
    f(
        "parallel/multi30k/test_2018_flickr.cs.gz",
        25181,
        "7d0a9db904f94c554a8c58049a9f3a5357c27f46cc3d710d70cb0b4a2585b8c2",
        Test,
        raw(&MULTI30K_REPO, "data/task1/raw/test_2018_flickr.cs.gz"),
    ),
    f(
        "parallel/multi30k/test_2018_flickr.de.gz",
        26461,
        "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
        Test,
        raw(&MULTI30K_REPO, "data/task1/raw/test_2018_flickr.de.gz"),
    ),
    f(
        "parallel/multi30k/test_2018_flickr.en.gz",
        23514,
        "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
        Test,
        raw(&MULTI30K_REPO, "data/task1/raw/test_2018_flickr.en.gz"),
    ),
    f(
        "parallel/multi30k/test_2018_flickr.fr.gz",
        25321,
        "fb2b83fcceb937a4f7e3e93c1c51c22aba92f1e342391e6b5ba392b16a920501",
        Test,
        raw(&MULTI30K_REPO, "data/task1/raw/test_2018_flickr.fr.gz"),
    ),
    f(
        "parallel/multi30k/train.cs.gz",
        593827,
        "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
        Train,
        raw(&MULTI30K_REPO, "data/task1/raw/train.cs.gz"),
    ),
    f(
        "parallel/multi30k/train.de.gz",
        637044,
        "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
        Train,
        raw(&MULTI30K_REPO, "data/task1/raw/train.de.gz"),
    ),
    f(
        "parallel/multi30k/train.en.gz",
        568929,
        "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
        Train,
        raw(&MULTI30K_REPO, "data/task1/raw/train.en.gz"),
    ),
    f(
        "parallel/multi30k/train.fr.gz",
        604242,
        "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
        Train,
        raw(&MULTI30K_REPO, "data/task1/raw/train.fr.gz"),
    ),
    f(
        "parallel/multi30k/val.cs.gz",
        22096,
        "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
        Dev,
        raw(&MULTI30K_REPO, "data/task1/raw/val.cs.gz"),
    ),
    f(
        "parallel/multi30k/val.de.gz",
        24681,
        "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
        Dev,
        raw(&MULTI30K_REPO, "data/task1/raw/val.de.gz"),
    ),
    f(
        "parallel/multi30k/val.en.gz",
        21650,
        "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
        Dev,
        raw(&MULTI30K_REPO, "data/task1/raw/val.en.gz"),
    ),
    f(
        "parallel/multi30k/val.fr.gz",
        23001,
        "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
        Dev,
        raw(&MULTI30K_REPO, "data/task1/raw/val.fr.gz"),
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Paths are unique and relative, checksums are sha256 hex, and a gunzipped file's source
    /// is a file of the same set fetched before it.
    #[test]
    fn the_table_is_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for s in SETS {
            for (i, file) in s.files.iter().enumerate() {
                assert!(seen.insert(file.path), "{} twice", file.path);
                assert!(
                    !file.path.starts_with('/') && !file.path.split('/').any(|c| c.is_empty() || c == "." || c == ".."),
                    "{}",
                    file.path
                );
                assert!(
                    file.sha256.len() == 64
                        && file.sha256.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
                    "{}",
                    file.path
                );
                if let Origin::Gunzip { of } = file.origin {
                    assert!(
                        s.files[..i].iter().any(|g| g.path == of && !matches!(g.origin, Origin::Gunzip { .. })),
                        "{}",
                        file.path
                    );
                }
            }
        }
        assert_eq!(test_files().filter(|(s, _)| s.name == "tatoeba").count(), 180);
        assert_eq!(find("bucc").map(|s| s.files.len()), Some(3));
    }
}
