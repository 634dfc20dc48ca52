"""DeMo: decoupled momentum, replicas sharing only the largest DCT coefficients of theirs."""

from .._base._checks import alias_errors
from .._base._typing import ArrayLike, DType, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain
from ..transforms import _decay
from ..transforms._demo import scale_by_demo
from ..transforms._scaling import scale_by_learning_rate


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def demo_momentum(
    learning_rate: ScalarOrSchedule,
    compression_decay: ArrayLike = 0.999,
    compression_topk: int = 32,
    compression_chunk: int = 64,
    weight_decay: ScalarOrSchedule = 0.0,
    *,
    axis_name: str | tuple[str, ...] | None = None,
    mu_dtype: DType | None = None,
) -> GradientTransformation:
    r"""DeMo: signSGD on the part of each replica's momentum that the replicas share, the top-k
    DCT coefficients per chunk.

    .. math::

      m_i \leftarrow \beta\, m_i + \eta_t\, g_i, \qquad
      s_i = \mathrm{top}_k\bigl(\mathrm{DCT}(m_i)\bigr), \qquad
      m_i \leftarrow m_i - \mathrm{IDCT}(s_i), \\
      w_t = w_{t-1} - \eta_t \Bigl(\mathrm{sign}\bigl(\mathrm{IDCT}(\mathrm{mean}_i\, s_i)\bigr)
        + \lambda\, w_{t-1}\Bigr)

    `chain(scale_by_demo(compression_decay, compression_topk, compression_chunk,
    axis_name=axis_name, mu_dtype=mu_dtype, learning_rate=learning_rate),
    add_decayed_weights(weight_decay), scale_by_learning_rate(learning_rate))`: the reference
    code's order of operations. The momentum accumulates
    :math:`\eta_t g_i` (so with a schedule each gradient keeps the weight of its own step's
    learning rate), and the decoupled weight decay :math:`w \leftarrow (1 - \eta_t\lambda)\, w`
    acts on the params before the step, which is adding :math:`\lambda w_{t-1}` before the
    learning rate. Run the step under a mapping over the replicas that binds `axis_name` (see
    `scale_by_demo`, which also says how the chunks are cut and what is counted as sent);
    `gradtx.metrics` reports `bytes_sent` and `total_bytes_sent`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule `count -> lr`.
      compression_decay: :math:`\beta` in [0, 1), the momentum's decay.
      compression_topk: :math:`k`, the DCT coefficients each replica sends per chunk, an
        integer >= 1.
      compression_chunk: :math:`c`, the chunk length along each chunked axis (1-D leaves in
        chunks of :math:`c`, 2-D leaves in :math:`c \times c` tiles), an integer >= 1.
      weight_decay: :math:`\lambda` >= 0, decoupled weight decay, a float or a schedule.
      axis_name: the name of the mapped axis over the replicas (or a tuple of names); None:
        one process, no communication.
      mu_dtype: dtype of the momentum and of the values sent (default: the params' dtype).

    Returns:
      A `GradientTransformation`; with weight decay it needs `params` in `update`.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> tx = gradtx.demo_momentum(0.01, compression_topk=4, compression_chunk=8,
      ...                           axis_name="replica")
      >>> params = {"w": jnp.zeros((4, 8, 8))}  # 4 replicas, each with its own copy
      >>> state = jax.vmap(tx.init)(params)
      >>> grads = {"w": jax.random.normal(jax.random.key(0), (4, 8, 8))}
      >>> def step(g, s, p):
      ...     u, s = tx.update(g, s, p)
      ...     return gradtx.apply_updates(p, u), s
      >>> params, state = jax.vmap(step, axis_name="replica")(grads, state, params)
      >>> bool(jnp.all(params["w"] == params["w"][0]))  # one shared step on every replica
      True
      >>> metrics = jax.vmap(lambda s: gradtx.metrics(tx, s))(state)
      >>> int(metrics["bytes_sent"][0])  # 4 coefficients, each a uint8 index and a float32
      20

    Reference: Peng, Quesnelle, Kingma et al., "DeMo: Decoupled Momentum Optimization" (ICLR
    2026, arXiv:2411.19870); the authors' `DeMo` optimizer (github.com/bloc97/DeMo, `demo.py`),
    whose defaults these are.
    """
    return chain(
        scale_by_demo(
            compression_decay,
            compression_topk,
            compression_chunk,
            axis_name=axis_name,
            mu_dtype=mu_dtype,
            learning_rate=learning_rate,
        ),
        _decay.weight_decay(weight_decay),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["demo_momentum"]
