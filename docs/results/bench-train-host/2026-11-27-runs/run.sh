#!/bin/bash
# usage: run.sh BIN CONFIG TAG  -> prints median step_s, fwd, bwd over steps 3..
bin=$1; cfg=$2; tag=$3; shift 3
out=/tmp/tim/$tag; rm -rf $out
cd /work/main
XSENT_MODELS=/work/main/models XSENT_DATA=/work/shared/data $bin train --config $cfg --out $out --set train.max_steps=${STEPS:-12} --set train.log_every=1 --set train.eval_at_start=false --unset train.val_sts --set train.checkpoint_every=0 "$@" >/dev/null 2>$out.err || { tail -3 $out.err; exit 1; }
python3 - $out/metrics.jsonl <<'P'
import json,sys,statistics as st
rows=[json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
rows=[r for r in rows if r.get('step',0)>=3]
keys=[k for k in rows[0] if k.endswith('_s')]
print(' '.join(f"{k}={st.median(r[k] for r in rows):.5f}" for k in keys), 'loss12=%.6g'%rows[-1]['loss'])
P
