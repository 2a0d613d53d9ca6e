//! sentence-transformers' `Dense` module: a linear map and an activation (Tanh unless the config
//! names Identity, as in sentence-transformers) after pooling, stored as
//! `N_Dense/config.json` + `N_Dense/model.safetensors` or `pytorch_model.bin` (`linear.weight`
//! `[out, in]`, `linear.bias`).

use super::encoder::Linear;
use super::weights::{self, Params};
use anyhow::{bail, ensure, Context, Result};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

const IDENTITY: &str = "torch.nn.modules.linear.Identity";
const TANH: &str = "torch.nn.modules.activation.Tanh";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenseActivation {
    Identity,
    Tanh,
}

#[derive(Debug, Clone)]
pub struct Dense {
    pub linear: Linear,
    pub activation: DenseActivation,
}

#[derive(serde::Deserialize)]
struct DenseConfig {
    in_features: usize,
    out_features: usize,
    #[serde(default = "yes")]
    bias: bool,
    #[serde(default)]
    activation_function: Option<String>,
    #[serde(default)]
    use_residual: bool,
}

fn yes() -> bool {
    true
}

impl Dense {
    /// A linear map from weight `[out, in]` and bias `[out]`.
    pub fn new(weight: Tensor, bias: Tensor) -> Self {
        Self { linear: Linear::new(weight, bias), activation: DenseActivation::Identity }
    }

    pub fn in_dim(&self) -> usize {
        self.linear.weight.dims()[1]
    }

    pub fn out_dim(&self) -> usize {
        self.linear.weight.dims()[0]
    }

    /// Load a sentence-transformers Dense module directory.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let cfg_path = dir.join("config.json");
        let text = std::fs::read_to_string(&cfg_path).with_context(|| format!("cannot read {}", cfg_path.display()))?;
        let cfg: DenseConfig =
            serde_json::from_str(&text).with_context(|| format!("invalid {}", cfg_path.display()))?;
        ensure!(
            cfg.in_features > 0 && cfg.out_features > 0,
            "{}: in_features {} and out_features {} must both be at least 1 (a vector of 0 values has no direction)",
            cfg_path.display(),
            cfg.in_features,
            cfg.out_features
        );
        // sentence-transformers' default, when the config names none, is Tanh.
        let activation = match cfg.activation_function.as_deref() {
            Some(IDENTITY) => DenseActivation::Identity,
            None | Some(TANH) => DenseActivation::Tanh,
            Some(other) => {
                bail!("{}: activation_function {other:?} is not supported (Identity, Tanh)", cfg_path.display())
            }
        };
        ensure!(
            !cfg.use_residual,
            "{}: use_residual = true (the input added to the output) is not supported by xsent; \
             it would run the module without it and give other vectors than sentence-transformers",
            cfg_path.display()
        );
        // sentence-transformers' order: model.safetensors, else pytorch_model.bin.
        let Some(w_path) = ["model.safetensors", "pytorch_model.bin"].iter().map(|f| dir.join(f)).find(|p| p.is_file())
        else {
            bail!(
                "Dense module {} has no weights: neither model.safetensors nor pytorch_model.bin is there",
                dir.display()
            );
        };
        let t = weights::read_weight_file(&w_path)?;
        let weight = t.get("linear.weight").with_context(|| format!("{} has no linear.weight", w_path.display()))?;
        weights::check_float_parameter(weight, "linear.weight", &w_path)?;
        let weight = weight.to_dtype(DType::F32)?.to_device(device)?;
        ensure!(
            weight.dims() == [cfg.out_features, cfg.in_features],
            "{}: linear.weight is {:?}, config says [{}, {}]",
            w_path.display(),
            weight.dims(),
            cfg.out_features,
            cfg.in_features
        );
        let bias = match (cfg.bias, t.get("linear.bias")) {
            (true, Some(b)) => {
                ensure!(
                    b.dims() == [cfg.out_features],
                    "{}: linear.bias is {:?}, config says [{}] (out_features)",
                    w_path.display(),
                    b.dims(),
                    cfg.out_features
                );
                weights::check_float_parameter(b, "linear.bias", &w_path)?;
                b.to_dtype(DType::F32)?.to_device(device)?
            }
            (true, None) => bail!("{} has no linear.bias though its config says bias = true", w_path.display()),
            (false, Some(_)) => bail!(
                "{} has a linear.bias though its config {} says bias = false: one of them is wrong \
                 (sentence-transformers refuses the pair too)",
                w_path.display(),
                cfg_path.display()
            ),
            (false, None) => Tensor::zeros(cfg.out_features, DType::F32, device)?,
        };
        let allowed = |k: &str| k == "linear.weight" || k == "linear.bias";
        if let Some((n, first)) = weights::unexpected_tensors(t.keys(), allowed) {
            bail!(
                "{} holds {n} tensor(s) a Dense module does not have (first: {first}); it has linear.weight and linear.bias only",
                w_path.display()
            );
        }
        Ok(Self { linear: Linear::new(weight, bias), activation })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.linear.forward(x)?;
        Ok(match self.activation {
            DenseActivation::Identity => y,
            DenseActivation::Tanh => y.tanh()?,
        })
    }

    /// The tensors under sentence-transformers' names.
    pub fn tensors(&self) -> HashMap<String, Tensor> {
        HashMap::from([
            ("linear.weight".to_string(), self.linear.weight.clone()),
            ("linear.bias".to_string(), self.linear.bias.clone()),
        ])
    }

    /// Make the weights trainable; returns the parameters (named `linear.weight`, `linear.bias`).
    pub fn make_trainable(&mut self) -> Result<Params> {
        let (t, params) = Params::from_tensors(self.tensors())?;
        self.linear = Linear::new(t["linear.weight"].clone(), t["linear.bias"].clone());
        Ok(params)
    }

    /// A copy whose tensors are detached from any autograd graph (sharing storage).
    pub fn detached(&self) -> Self {
        Self {
            linear: Linear::new(self.linear.weight.detach(), self.linear.bias.detach()),
            activation: self.activation,
        }
    }

    /// Write the module directory (`config.json`, `model.safetensors`).
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let act = match self.activation {
            DenseActivation::Identity => IDENTITY,
            DenseActivation::Tanh => TANH,
        };
        let cfg = serde_json::json!({
            "in_features": self.in_dim(),
            "out_features": self.out_dim(),
            "bias": true,
            "activation_function": act,
        });
        std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&cfg)?)?;
        weights::save_tensors(&self.tensors(), &dir.join("model.safetensors"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Dense directory of `out × in` weights and a bias of `bias` values.
    fn module(dir: &Path, out: usize, inp: usize, bias: &[usize]) {
        std::fs::create_dir_all(dir).unwrap();
        let cfg = serde_json::json!({"in_features": inp, "out_features": out, "bias": true});
        std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
        let t = HashMap::from([
            ("linear.weight".to_string(), Tensor::zeros((out, inp), DType::F32, &Device::Cpu).unwrap()),
            ("linear.bias".to_string(), Tensor::zeros(bias, DType::F32, &Device::Cpu).unwrap()),
        ]);
        weights::save_tensors(&t, &dir.join("model.safetensors")).unwrap();
    }

    /// A bias of another shape, or a module of 0 outputs, is refused at load, naming the file
    /// (an outside probe: the bias failed at the first batch naming no file; 0 outputs gave
    /// empty vectors with exit 0).
    #[test]
    fn a_bias_of_another_shape_and_empty_modules_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let load =
            |name: &str| Dense::load(&dir.path().join(name), &Device::Cpu).map(|_| ()).map_err(|e| format!("{e:#}"));
        module(&dir.path().join("good"), 16, 32, &[16]);
        assert_eq!(load("good"), Ok(()));
        module(&dir.path().join("short"), 16, 32, &[7]);
        let e = load("short").unwrap_err();
        assert!(e.contains("short/model.safetensors: linear.bias is [7], config says [16]"), "{e}");
        module(&dir.path().join("square"), 16, 32, &[16, 1]);
        assert!(load("square").unwrap_err().contains("linear.bias is [16, 1]"));
        module(&dir.path().join("none"), 0, 32, &[0]);
        let e = load("none").unwrap_err();
        assert!(e.contains("none/config.json: in_features 32 and out_features 0 must both be at least 1"), "{e}");
    }

    /// The config read as sentence-transformers reads it (an outside probe: each of these ran
    /// with exit 0 and other vectors): no `activation_function` is Tanh, `use_residual` is
    /// refused (xsent does not run it), and so are a bias the config says is not there and
    /// tensors a Dense module does not have.
    #[test]
    fn the_config_is_read_as_sentence_transformers_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join("m");
        module(&m, 16, 32, &[16]);
        assert_eq!(Dense::load(&m, &Device::Cpu).unwrap().activation, DenseActivation::Tanh);
        let with = |cfg: serde_json::Value| {
            std::fs::write(m.join("config.json"), cfg.to_string()).unwrap();
            Dense::load(&m, &Device::Cpu).map_err(|e| format!("{e:#}"))
        };
        let identity = serde_json::json!({"in_features": 32, "out_features": 16, "activation_function": IDENTITY});
        assert_eq!(with(identity).unwrap().activation, DenseActivation::Identity);
        let e = with(serde_json::json!({"in_features": 32, "out_features": 16, "use_residual": true})).unwrap_err();
        assert!(e.contains("use_residual = true") && e.contains("not supported"), "{e}");
        let e = with(serde_json::json!({"in_features": 32, "out_features": 16, "bias": false})).unwrap_err();
        assert!(e.contains("has a linear.bias though its config") && e.contains("bias = false"), "{e}");
        let mut t = weights::read_weight_file(&m.join("model.safetensors")).unwrap();
        t.insert("linear.foo".into(), Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap());
        weights::save_tensors(&t, &m.join("model.safetensors")).unwrap();
        let e = with(serde_json::json!({"in_features": 32, "out_features": 16})).unwrap_err();
        assert!(e.contains("1 tensor(s) a Dense module does not have (first: linear.foo)"), "{e}");
    }

    /// Weights or a bias stored as integers are refused, naming the tensor and its type.
    #[test]
    fn integer_weights_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (name, shape) in [("linear.weight", vec![16, 32]), ("linear.bias", vec![16])] {
            let m = dir.path().join(name);
            module(&m, 16, 32, &[16]);
            let mut t = weights::read_weight_file(&m.join("model.safetensors")).unwrap();
            t.insert(name.to_string(), Tensor::zeros(shape, DType::I32, &Device::Cpu).unwrap());
            weights::save_tensors(&t, &m.join("model.safetensors")).unwrap();
            let e = format!("{:#}", Dense::load(&m, &Device::Cpu).map(|_| ()).unwrap_err());
            assert!(e.contains(&format!("tensor {name} of")) && e.contains("I32"), "{e}");
        }
    }
}
