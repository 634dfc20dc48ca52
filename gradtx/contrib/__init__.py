"""gradtx.contrib: the optimizers of `optax.contrib`, under Optax's names and argument names.

Recent and research optimizers (Muon, schedule-free, Prodigy, D-Adaptation, DoG, Mechanic, COCOB,
Sophia, SAM, ADOPT, AdEMAMix, MADGRAD, MoMo, GaLore, AdaBelief-style ACProp, DP-SGD) live here, as
in Optax, so that `optax.contrib.muon` becomes `gradtx.contrib.muon`. Each is a chain of public
primitives where the algorithm allows. The public API, re-exported explicitly; no logic here.
"""

# -- contrib, part A (muon, schedule-free, prodigy, dadapt, dog/dowg, mechanize, cocob) ----------

# -- contrib, part B (sophia, sam, adopt, ademamix, madgrad, momo, galore, acprop, dpsgd) --------
