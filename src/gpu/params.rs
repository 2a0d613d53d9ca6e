//! Each of xsent's CUDA kernels' parameter lists, in the kernel's order, with the kernel's names
//! for them, and the kernel they belong to: one function per kernel (its f32 and bf16 forms
//! share it and are chosen by a [`Ty`]), returning the kernel's name with the list built from
//! the values a launch passes. The CUDA side launches from these (`Loaded` loads the kernel by
//! that name and makes the launch's arguments from the list it holds, so a call site cannot pair
//! a list with another kernel), the CPU emulation of the kernels (tests/gpu_emulated.rs) runs the
//! same, and a test here reads each kernel's signature in its `.cu` source and checks every list
//! against it, name by name and type by type. So an argument in the wrong place, or a list given
//! to the wrong kernel, is a test failure on any machine, where before only a GPU (wrong values)
//! could show it: the PTX check at launch sees the types, not the order. Compiled in every build
//! (plain data).

/// The element type of a kernel's f32 or bf16 form: the suffix of its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    F32,
    Bf16,
}

/// `xsent_{base}_f32` or `xsent_{base}_bf16`, by `ty`: the names of a kernel's two forms,
/// written once.
macro_rules! form {
    ($ty:expr, $base:literal) => {
        match $ty {
            Ty::F32 => concat!("xsent_", $base, "_f32"),
            Ty::Bf16 => concat!("xsent_", $base, "_bf16"),
        }
    };
}

/// A launch's kernel: its name and its parameter list, built together.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Kernel<const N: usize> {
    pub name: &'static str,
    pub params: [Param; N],
}

impl<const N: usize> Kernel<N> {
    /// The kernel's name and list, borrowed: what a launch takes, whatever the list's length.
    pub fn list(&self) -> List<'_> {
        List { kernel: self.name, params: &self.params }
    }
}

/// A kernel's name and its parameter list, as a launch takes them (from [`Kernel::list`]).
#[derive(Clone, Copy, Debug)]
pub struct List<'a> {
    pub kernel: &'static str,
    pub params: &'a [Param],
}

/// A kernel parameter's value: a device buffer (given at launch, by its name) or a scalar of the
/// kernel's type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Buf,
    U64(u64),
    U32(u32),
    F32(f32),
}

/// One parameter: the kernel's name for it and its value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Param {
    pub name: &'static str,
    pub value: Value,
}

impl Param {
    /// The parameter's type letter: `p` a buffer (a pointer), else as `launch::ptx_params`
    /// writes it (`Q` a 64-bit integer, `I` a 32-bit one, `f` an f32).
    pub fn letter(&self) -> char {
        match self.value {
            Value::Buf => 'p',
            Value::U64(_) => 'Q',
            Value::U32(_) => 'I',
            Value::F32(_) => 'f',
        }
    }
}

/// A kernel's list as its arguments are pushed: the scalars, in order, between the buffers the
/// caller gives by name. The CUDA side (`Args`) pushes what this yields; the tests here run it
/// without a GPU.
#[derive(Debug)]
pub struct Cursor<'a> {
    params: &'a [Param],
    /// The next parameter to push.
    next: usize,
    /// The type letters of the parameters pushed so far, as the PTX has them (a pointer is `Q`).
    letters: String,
    /// The first buffer given out of order, or of a name the list does not have.
    fault: Option<String>,
}

impl<'a> Cursor<'a> {
    pub fn new(params: &'a [Param]) -> Self {
        Cursor { params, next: 0, letters: String::new(), fault: None }
    }

    /// The scalars from here to the next buffer (or the list's end), to push in this order.
    pub fn scalars(&mut self) -> &'a [Param] {
        let (params, start) = (self.params, self.next);
        while let Some(p) = params.get(self.next).filter(|p| p.value != Value::Buf) {
            self.letters.push(p.letter());
            self.next += 1;
        }
        &params[start..self.next]
    }

    /// Whether buffer `name` is the next parameter (call after [`Self::scalars`]): then it is
    /// pushed; otherwise the first such fault is kept for [`Self::finish`].
    pub fn buf(&mut self, name: &str) -> bool {
        match self.params.get(self.next) {
            Some(p) if p.name == name && p.value == Value::Buf => {
                self.letters.push('Q');
                self.next += 1;
                true
            }
            other => {
                let want = other.map_or("no more parameters".to_string(), |p| format!("`{}`", p.name));
                self.fault.get_or_insert(format!("buffer `{name}` given where the kernel takes {want}"));
                false
            }
        }
    }

    /// After the last scalars: the letters pushed, or what went wrong (a buffer out of order or
    /// unknown, or one not given).
    pub fn finish(&mut self) -> Result<&str, String> {
        if let Some(fault) = self.fault.take() {
            return Err(fault);
        }
        match self.params.get(self.next) {
            Some(p) => Err(format!("`{}` not given", p.name)),
            None => Ok(&self.letters),
        }
    }
}

fn buf(name: &'static str) -> Param {
    Param { name, value: Value::Buf }
}

fn u64(name: &'static str, v: usize) -> Param {
    Param { name, value: Value::U64(v as u64) }
}

/// A 32-bit count: the callers check that it fits (`launch::row_width`: a row, or a softmax's
/// keys, at most `launch::MAX_ROW`; head strides and the like are 64-bit).
fn u32(name: &'static str, v: usize) -> Param {
    Param { name, value: Value::U32(v as u32) }
}

fn f32(name: &'static str, v: f32) -> Param {
    Param { name, value: Value::F32(v) }
}

/// `xsent_layer_norm_{f32,bf16}`: `x`, `w`, `b` and the output `y`; `rows` rows of `n`.
pub fn layer_norm(ty: Ty, rows: usize, n: usize, eps: f32) -> Kernel<7> {
    let params = [buf("x"), buf("w"), buf("b"), buf("y"), u64("rows", rows), u32("n", n), f32("eps", eps)];
    Kernel { name: form!(ty, "layer_norm"), params }
}

/// `xsent_layer_norm_grad_x_{f32,bf16}`: the input's gradient `dx` from `x`, `w` and the
/// output's gradient `g`.
pub fn layer_norm_grad_x(ty: Ty, rows: usize, n: usize, eps: f32) -> Kernel<7> {
    let params = [buf("x"), buf("w"), buf("g"), buf("dx"), u64("rows", rows), u32("n", n), f32("eps", eps)];
    Kernel { name: form!(ty, "layer_norm_grad_x"), params }
}

/// `xsent_layer_norm_g_xhat_{f32,bf16}`: `g ⊙ x̂` (`gxhat`, f32) from `x` and `g`.
pub fn layer_norm_g_xhat(ty: Ty, rows: usize, n: usize, eps: f32) -> Kernel<6> {
    let params = [buf("x"), buf("g"), buf("gxhat"), u64("rows", rows), u32("n", n), f32("eps", eps)];
    Kernel { name: form!(ty, "layer_norm_g_xhat"), params }
}

/// `xsent_column_sums2_{f32,bf16}`: the column sums of `a` (f32) and of `b` (of `ty`) into
/// `out` (`2·n`, f32).
pub fn column_sums2(ty: Ty, rows: usize, n: usize) -> Kernel<5> {
    let params = [buf("a"), buf("b"), buf("out"), u64("rows", rows), u32("n", n)];
    Kernel { name: form!(ty, "column_sums2"), params }
}

/// `xsent_column_sums_{f32,bf16}`: the column sums of `a` into `out`.
pub fn column_sums(ty: Ty, rows: usize, n: usize) -> Kernel<4> {
    Kernel { name: form!(ty, "column_sums"), params: [buf("a"), buf("out"), u64("rows", rows), u32("n", n)] }
}

/// `xsent_masked_softmax_{f32,bf16}`: `y = softmax(x + bias)` over rows of `lk`, `rows_per_bias`
/// score rows per bias row.
pub fn masked_softmax(ty: Ty, rows: usize, lk: usize, rows_per_bias: usize) -> Kernel<6> {
    let params =
        [buf("x"), buf("bias"), buf("y"), u64("rows", rows), u32("lk", lk), u64("rows_per_bias", rows_per_bias)];
    Kernel { name: form!(ty, "masked_softmax"), params }
}

/// `xsent_softmax_grad_f32` (f32 only): `dx` from the probabilities `y` and their gradient `g`.
pub fn softmax_grad(rows: usize, n: usize) -> Kernel<5> {
    Kernel { name: "xsent_softmax_grad_f32", params: [buf("y"), buf("g"), buf("dx"), u64("rows", rows), u32("n", n)] }
}

/// `xsent_masked_softmax_grad_bf16` (bf16 only): `dx` from the scores `x`, the `bias` and the
/// probabilities' gradient `g`.
pub fn masked_softmax_grad(rows: usize, lk: usize, rows_per_bias: usize) -> Kernel<7> {
    let (rows, lk, per_bias) = (u64("rows", rows), u32("lk", lk), u64("rows_per_bias", rows_per_bias));
    let params = [buf("x"), buf("bias"), buf("g"), buf("dx"), rows, lk, per_bias];
    Kernel { name: "xsent_masked_softmax_grad_bf16", params }
}

/// `xsent_gelu_{f32,bf16}`: `y = gelu(x)` over `n` elements.
pub fn gelu(ty: Ty, n: usize) -> Kernel<3> {
    Kernel { name: form!(ty, "gelu"), params: [buf("x"), buf("y"), u64("n", n)] }
}

/// `xsent_gelu_grad_{f32,bf16}`: `dx` from `x` and the output's gradient `g`.
pub fn gelu_grad(ty: Ty, n: usize) -> Kernel<4> {
    Kernel { name: form!(ty, "gelu_grad"), params: [buf("x"), buf("g"), buf("dx"), u64("n", n)] }
}

/// `xsent_heads_{f32,bf16}`: the gather of `x` into `y` over `dims` = `[B, heads, L, d]` with the
/// input's `strides` (`[sb, sh, st, se]`, `launch::heads_strides`), a merge or a split, the
/// split's values times `scale` where given (already rounded to the dtype).
pub fn heads(ty: Ty, dims: [usize; 4], strides: [usize; 4], merge: bool, scale: Option<f32>) -> Kernel<13> {
    let [b, nh, l, d] = dims;
    let [sb, sh, st, se] = strides;
    let params = [
        buf("x"),
        buf("y"),
        u64("n", b * nh * l * d),
        u64("l", l),
        u64("nh", nh),
        u64("d", d),
        u64("sb", sb),
        u64("sh", sh),
        u64("st", st),
        u64("se", se),
        u32("merge", merge as usize),
        u32("scaled", scale.is_some() as usize),
        f32("scale", scale.unwrap_or(1.0)),
    ];
    Kernel { name: form!(ty, "heads"), params }
}

/// `xsent_dropout_{f32,bf16}`: `out = x ⊙ mask(seed, p) · scale` over `n` elements.
pub fn dropout(ty: Ty, n: usize, seed: u64, p: f32, scale: f32) -> Kernel<6> {
    let seed = Param { name: "seed", value: Value::U64(seed) };
    Kernel {
        name: form!(ty, "dropout"),
        params: [buf("x"), buf("out"), u64("n", n), seed, f32("p", p), f32("scale", scale)],
    }
}

/// AdamW's scalars shared by every parameter of a step: β1, β2, the bias corrections
/// `1 − β1ᵗ` and `1 − β2ᵗ`, ε, and the gradients' clipping scale.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    pub b1: f32,
    pub b2: f32,
    pub bc1: f32,
    pub bc2: f32,
    pub eps: f32,
    pub grad_scale: f32,
}

/// `xsent_adamw_f32`: one parameter `p` of `n` values, its gradient `g` and moments `m`, `v`,
/// updated in place with learning rate `lr` and weight decay `decay`.
pub fn adamw(n: usize, lr: f32, decay: f32, s: &AdamWStep) -> Kernel<13> {
    let params = [
        buf("p"),
        buf("g"),
        buf("m"),
        buf("v"),
        u64("n", n),
        f32("lr", lr),
        f32("b1", s.b1),
        f32("b2", s.b2),
        f32("bc1", s.bc1),
        f32("bc2", s.bc2),
        f32("eps", s.eps),
        f32("decay", decay),
        f32("grad_scale", s.grad_scale),
    ];
    Kernel { name: "xsent_adamw_f32", params }
}

/// `xsent_adamw_many_f32`: every parameter of a step from its `table` (`launch::table`: six
/// fields of `tensors` values, then the chunks of `chunk` elements).
pub fn adamw_many(tensors: usize, chunk: usize, s: &AdamWStep) -> Kernel<9> {
    let params = [
        buf("table"),
        u64("tensors", tensors),
        u64("chunk", chunk),
        f32("b1", s.b1),
        f32("b2", s.b2),
        f32("bc1", s.bc1),
        f32("bc2", s.bc2),
        f32("eps", s.eps),
        f32("grad_scale", s.grad_scale),
    ];
    Kernel { name: "xsent_adamw_many_f32", params }
}

/// `xsent_sumsq_many_f32`: Σx² of each chunk of the tensors in `table` (two fields) into
/// `partial` (f64, one per chunk).
pub fn sumsq_many(tensors: usize, chunk: usize) -> Kernel<4> {
    let params = [buf("table"), u64("tensors", tensors), u64("chunk", chunk), buf("partial")];
    Kernel { name: "xsent_sumsq_many_f32", params }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels `src` declares, each with its parameters' names and type letters.
    fn signatures(src: &str) -> Vec<(String, Vec<(String, char)>)> {
        let mut out = Vec::new();
        for part in src.split("extern \"C\" __global__ void ").skip(1) {
            let (name, rest) = part.split_once('(').expect("a kernel's parameter list");
            let list = &rest[..rest.find(')').expect("the list's end")];
            let params = list
                .split(',')
                .map(|p| {
                    let p = p.split_whitespace().collect::<Vec<_>>().join(" ");
                    let (ty, name) = p.rsplit_once(' ').expect("a type and a name");
                    let pointer = ty.ends_with('*') || name.starts_with('*');
                    let letter = match ty.trim_start_matches("const ") {
                        _ if pointer => 'p',
                        "unsigned long long" => 'Q',
                        "unsigned int" => 'I',
                        "float" => 'f',
                        other => panic!("{name}: a parameter type this test does not know: {other}"),
                    };
                    (name.trim_start_matches('*').to_string(), letter)
                })
                .collect();
            out.push((name.trim().to_string(), params));
        }
        out
    }

    /// Every kernel's parameters as its `.cu` source declares them.
    fn declared() -> Vec<(String, Vec<(String, char)>)> {
        [
            include_str!("adamw.cu"),
            include_str!("dropout.cu"),
            include_str!("gelu.cu"),
            include_str!("heads.cu"),
            include_str!("layer_norm.cu"),
            include_str!("linear.cu"),
            include_str!("softmax.cu"),
        ]
        .into_iter()
        .flat_map(signatures)
        .collect()
    }

    /// A list's names and letters, as [`signatures`] gives a kernel's.
    fn named(list: &[Param]) -> Vec<(String, char)> {
        list.iter().map(|p| (p.name.to_string(), p.letter())).collect()
    }

    /// One list function's call: the function's name, the form asked for (`None`: a kernel of
    /// one form), and what it returned (the kernel's name and list).
    type Call = (&'static str, Option<Ty>, &'static str, Vec<Param>);

    fn call<const N: usize>(f: &'static str, ty: Option<Ty>, k: Kernel<N>) -> Call {
        (f, ty, k.name, k.params.to_vec())
    }

    /// Every list function's kernels and lists (both forms where a kernel has two), from
    /// arbitrary values.
    fn calls() -> Vec<Call> {
        let step = AdamWStep { b1: 0.9, b2: 0.99, bc1: 0.1, bc2: 0.01, eps: 1e-8, grad_scale: 1.0 };
        let mut out = vec![
            call("softmax_grad", None, softmax_grad(6, 5)),
            call("masked_softmax_grad", None, masked_softmax_grad(6, 5, 2)),
            call("adamw", None, adamw(7, 1e-3, 0.01, &step)),
            call("adamw_many", None, adamw_many(2, 1 << 16, &step)),
            call("sumsq_many", None, sumsq_many(2, 1 << 16)),
        ];
        for ty in [Ty::F32, Ty::Bf16] {
            let t = Some(ty);
            out.extend([
                call("layer_norm", t, layer_norm(ty, 3, 4, 1e-5)),
                call("layer_norm_grad_x", t, layer_norm_grad_x(ty, 3, 4, 1e-5)),
                call("layer_norm_g_xhat", t, layer_norm_g_xhat(ty, 3, 4, 1e-5)),
                call("column_sums2", t, column_sums2(ty, 3, 4)),
                call("column_sums", t, column_sums(ty, 3, 4)),
                call("masked_softmax", t, masked_softmax(ty, 6, 5, 2)),
                call("gelu", t, gelu(ty, 7)),
                call("gelu_grad", t, gelu_grad(ty, 7)),
                call("heads", t, heads(ty, [1, 2, 3, 4], [24, 4, 8, 1], false, Some(0.5))),
                call("dropout", t, dropout(ty, 7, 42, 0.1, 1.0 / 0.9)),
            ]);
        }
        out
    }

    #[test]
    fn every_kernels_list_is_its_signature() {
        let declared = declared();
        assert_eq!(
            declared.len(),
            25,
            "kernels in src/gpu/*.cu: {:?}",
            declared.iter().map(|d| &d.0).collect::<Vec<_>>()
        );
        let calls = calls();
        for (kernel, want) in &declared {
            let mut lists = calls.iter().filter(|c| c.2 == kernel);
            let Some((f, _, _, list)) = lists.next() else {
                panic!("{kernel}: no parameter list in src/gpu/params.rs")
            };
            assert!(lists.next().is_none(), "{kernel}: two list functions return it");
            assert_eq!(&named(list), want, "{kernel} (from `{f}`): the list (left) against the .cu signature (right)");
        }
        assert_eq!(calls.len(), declared.len(), "a list names a kernel the .cu files do not declare");
    }

    /// The table above calls every function here that returns a kernel (a new one left out of it
    /// would go unchecked).
    #[test]
    fn every_kernels_function_is_called_above() {
        let src = include_str!("params.rs");
        let code = &src[..src.find("#[cfg(test)]").expect("the tests' start")];
        let mut functions: Vec<&str> = code
            .split("pub fn ")
            .skip(1)
            .filter(|f| f[..f.find('{').unwrap_or(f.len())].contains("-> Kernel<"))
            .map(|f| &f[..f.find('(').expect("a parameter list")])
            .collect();
        let mut called: Vec<&str> = calls().iter().map(|c| c.0).collect();
        functions.sort_unstable();
        called.sort_unstable();
        called.dedup();
        assert_eq!(functions.len(), 15, "{functions:?}");
        assert_eq!(called, functions, "functions called by `calls` (left) against those in params.rs (right)");
    }

    /// `params::f(Ty::Bf16, …)` is `xsent_f_bf16`'s list, and so on (the emulated tests' check
    /// that each kernel runs there from its list reads the call by this rule).
    #[test]
    fn each_kernel_is_named_after_its_function_and_form() {
        for (f, ty, kernel, _) in calls() {
            let forms = match ty {
                Some(Ty::F32) => vec!["f32"],
                Some(Ty::Bf16) => vec!["bf16"],
                None => vec!["f32", "bf16"],
            };
            assert!(forms.iter().any(|s| kernel == format!("xsent_{f}_{s}")), "`{f}` ({ty:?}) returns {kernel}");
        }
    }

    #[test]
    fn a_moved_parameter_is_seen() {
        // The check is only as good as the reader: heads.cu with two parameters of one type
        // swapped must read differently, a pointer written `float *y` the same.
        let heads_cu = include_str!("heads.cu");
        let ours = named(&heads(Ty::F32, [1, 2, 3, 4], [24, 4, 8, 1], false, None).params);
        assert_eq!(signatures(heads_cu)[0].1, ours);
        let first = "float* y, unsigned long long n, unsigned long long l, unsigned long long nh,";
        let swapped =
            heads_cu.replacen(first, "float* y, unsigned long long n, unsigned long long nh, unsigned long long l,", 1);
        assert_ne!(swapped, heads_cu, "the swap must apply to heads.cu's first kernel");
        assert_ne!(signatures(&swapped)[0].1, ours);
        let spaced = heads_cu.replacen(first, &first.replace("float* y", "float *y"), 1);
        assert_ne!(spaced, heads_cu);
        assert_eq!(signatures(&spaced)[0].1, ours);
        // A buffer where the kernel takes a 64-bit count reads differently too.
        let gelu_f32 = &signatures(include_str!("gelu.cu"))[0];
        let k = gelu(Ty::F32, 4);
        assert_eq!((gelu_f32.0.as_str(), named(&k.params)), (k.name, gelu_f32.1.clone()));
        assert_ne!(named(&[buf("x"), buf("y"), buf("n")]), gelu_f32.1);
    }

    /// Pushes `bufs` in turn as `Args` does (the scalars before each, the rest at the end).
    fn push(list: &[Param], bufs: &[&str]) -> Result<(String, Vec<&'static str>), String> {
        let (mut c, mut order) = (Cursor::new(list), Vec::new());
        for b in bufs {
            order.extend(c.scalars().iter().map(|p| p.name));
            if c.buf(b) {
                order.push(list.iter().find(|p| p.name == *b).unwrap().name);
            }
        }
        order.extend(c.scalars().iter().map(|p| p.name));
        c.finish().map(|l| (l.to_string(), order))
    }

    #[test]
    fn the_cursor_pushes_in_the_lists_order_and_names_what_is_wrong() {
        // Scalars between buffers (Σx²'s list) and after them (LayerNorm's).
        let (letters, order) = push(&sumsq_many(2, 8).params, &["table", "partial"]).unwrap();
        // The letters as the PTX has them: a buffer is a 64-bit value there.
        assert_eq!((letters.as_str(), order), ("QQQQ", vec!["table", "tensors", "chunk", "partial"]));
        let (letters, _) = push(&layer_norm(Ty::F32, 3, 4, 1e-5).params, &["x", "w", "b", "y"]).unwrap();
        assert_eq!(letters, "QQQQQIf");
        // Two buffers swapped, an unknown name, one left out, one too many.
        let err = push(&layer_norm(Ty::F32, 3, 4, 1e-5).params, &["x", "b", "w", "y"]).unwrap_err();
        assert_eq!(err, "buffer `b` given where the kernel takes `w`");
        assert!(push(&gelu(Ty::F32, 4).params, &["x", "out"])
            .unwrap_err()
            .contains("`out` given where the kernel takes `y`"));
        assert_eq!(push(&gelu(Ty::F32, 4).params, &["x"]).unwrap_err(), "`y` not given");
        let err = push(&gelu(Ty::F32, 4).params, &["x", "y", "y"]).unwrap_err();
        assert_eq!(err, "buffer `y` given where the kernel takes no more parameters");
        // A scalar's name is not a buffer's.
        assert!(push(&gelu(Ty::F32, 4).params, &["x", "n"]).is_err());
    }

    #[test]
    fn values_land_under_their_names() {
        // Strides unlike every other value (not a real layout: only where each value lands matters).
        let p = heads(Ty::Bf16, [2, 3, 5, 7], [1000, 300, 20, 2], true, Some(0.25)).params;
        let get = |name: &str| p.iter().find(|x| x.name == name).unwrap().value;
        assert_eq!(get("n"), Value::U64(210));
        assert_eq!(get("l"), Value::U64(5));
        assert_eq!(get("nh"), Value::U64(3));
        assert_eq!(get("d"), Value::U64(7));
        assert_eq!(get("sb"), Value::U64(1000));
        assert_eq!(get("sh"), Value::U64(300));
        assert_eq!(get("st"), Value::U64(20));
        assert_eq!(get("se"), Value::U64(2));
        assert_eq!(get("merge"), Value::U32(1));
        assert_eq!(get("scaled"), Value::U32(1));
        assert_eq!(get("scale"), Value::F32(0.25));
        let step = AdamWStep { b1: 1.0, b2: 2.0, bc1: 3.0, bc2: 4.0, eps: 5.0, grad_scale: 6.0 };
        let a = adamw(9, 7.0, 8.0, &step).params;
        let f: Vec<(&str, Value)> = a[5..].iter().map(|p| (p.name, p.value)).collect();
        assert_eq!(
            f,
            [
                ("lr", 7.0),
                ("b1", 1.0),
                ("b2", 2.0),
                ("bc1", 3.0),
                ("bc2", 4.0),
                ("eps", 5.0),
                ("decay", 8.0),
                ("grad_scale", 6.0)
            ]
            .map(|(n, v)| (n, Value::F32(v)))
        );
        let d = dropout(Ty::F32, 10, u64::MAX, 0.5, 2.0).params;
        assert_eq!(d[3].value, Value::U64(u64::MAX));
    }
}
