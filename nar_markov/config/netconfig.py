"""The net's configuration (history policy, architecture): a gin-configurable dataclass, no jax."""

from __future__ import annotations

import dataclasses

import gin

# What the processor receives as history at step t (paper Eq. 2, 3, 4).  A new policy is
# its name here plus its branch in nar_markov/nets/model.py Net._history (which refuses a
# name without one), its gin model file and, if it is one of the paper's labels,
# components.PAPER_LABELS.
HISTORY_POLICIES = ("full", "none", "gated")
# Which consumers of h(t-1) the history policy applies to; the others see the raw
# h(t-1), as dm-clrs feeds it.  dm-clrs's net reads h(t-1) in three places: the
# processor input z = [x(t), h(t-1)], the Triplet-GMPNN update residual
# (1 - u) * h(t-1), and the decoder input [x(t), h(t-1), h(t)].
HISTORY_SCOPES = ("processor_input", "processor", "processor_decoder")
# What the decoders read of the nodes: 'dmclrs' is dm-clrs's
# h_t = [x(t), h(t-1) (what the scope lets through), h(t)]; 'processed' is h(t) alone, the
# paper's "processed node embeddings" (the pilot of docs/design.md).  Edge decoders read
# their edge features and triplet messages under both.
DECODER_INPUTS = ("dmclrs", "processed")
IMPLS = ("auto", "fast", "reference")
FAST_PROCESSORS = ("triplet_gmpnn", "triplet_mpnn")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class NetConfig:
  """The net: its history policy and architecture (gin: ``NetConfig.*``).

  `history` is what tells the paper's three models apart (baseline 'full', ForgetNet
  'none', G-ForgetNet 'gated'; gin/baseline.gin, gin/forget.gin, gin/gforget.gin bind it).
  The other defaults are the paper's pipeline (Ibarz et al. 2022): Triplet-GMPNN, hidden
  128, 8 triplet features.  The comments beside the fields say what each means.

  Raises:
    ValueError: on construction, for a history, history_scope, decoder_input or impl
      outside `HISTORY_POLICIES`, `HISTORY_SCOPES`, `DECODER_INPUTS` or `IMPLS`,
      hidden_size <= 0, nb_msg_passing_steps < 1, xla_heap_mib < 0, gate_mlp_layers < 1,
      or impl 'fast' for a processor outside `FAST_PROCESSORS`.
  """
  hidden_size: int = 128
  history: str = "full"
  # Where the policy applies (HISTORY_SCOPES):
  #   processor_input    z only (Eq. 4 as written); the update residual and the
  #                      decoders see the raw h(t-1);
  #   processor          z and the update residual; the decoders see the raw h(t-1);
  #   processor_decoder  all three (the default): ForgetNet is then exactly
  #                      independent of h(t-1), and G-ForgetNet is Markov when its
  #                      gate is shut.  Eq. 3's "remove the use of h(t-1)" read
  #                      literally; docs/design.md says what the evidence shows.
  history_scope: str = "processor_decoder"
  # The node embeddings the decoders read (DECODER_INPUTS).  Under 'processed' no
  # decoder reads h(t-1), so the scopes 'processor' and 'processor_decoder' are one net.
  decoder_input: str = "dmclrs"
  # gin/base.gin binds the pipeline's processor, Triplet-MPNN since the processor call
  # (docs/design.md, "Which processor"); this default stays the net the tests' tiny runs
  # and golden sets were written on.
  processor: str = "triplet_gmpnn"
  use_ln: bool = True
  nb_triplet_fts: int = 8
  nb_msg_passing_steps: int = 1
  encoder_init: str = "xavier_on_scalars"
  # Eq. 5 says "a simple MLP"; we use Linear-ReLU-Linear of width hidden_size.
  gate_mlp_layers: int = 2
  # Initial bias of the gate's last layer: 0 starts the gate half open, g ~ 0.5.
  gate_bias_init: float = 0.0
  # How the same function is computed: 'reference' runs dm-clrs's modules as
  # they are; 'fast' is nar_markov.nets.fastnet (same parameters, same function up
  # to round-off, less work); 'auto' = 'fast' where it exists (FAST_PROCESSORS).
  impl: str = "auto"
  # Fast path, training: recompute each step's forward in the backward pass
  # instead of storing its intermediates (on CPU the stores and copies of
  # [B, N, N, H] residuals cost more than the recomputation; see README).
  remat: bool = True
  # CPU only: split a compiled step's scratch into heaps of at most this many MiB
  # (XLA's xla_multiheap_size_constraint_per_heap), so that glibc reuses it instead of
  # mapping and zeroing it afresh every step.  Where buffers go, not a bit of what is
  # computed (tests/test_learner.py); a step whose scratch fits (every step of the test
  # suite) stays one buffer and can be compile-cached.  0 = XLA's one buffer always.
  xla_heap_mib: int = 30

  def __post_init__(self):
    if self.history not in HISTORY_POLICIES:
      raise ValueError(
          f"history must be one of {HISTORY_POLICIES}, got {self.history!r}")
    if self.history_scope not in HISTORY_SCOPES:
      raise ValueError(f"history_scope must be one of {HISTORY_SCOPES}, "
                       f"got {self.history_scope!r}")
    if self.decoder_input not in DECODER_INPUTS:
      raise ValueError(f"decoder_input must be one of {DECODER_INPUTS}, "
                       f"got {self.decoder_input!r}")
    if int(self.hidden_size) <= 0:
      raise ValueError(f"hidden_size must be > 0, got {self.hidden_size}")
    if self.nb_msg_passing_steps < 1:
      raise ValueError("nb_msg_passing_steps must be >= 1")
    if int(self.xla_heap_mib) < 0:
      raise ValueError(f"xla_heap_mib must be >= 0, got {self.xla_heap_mib}")
    if self.gate_mlp_layers < 1:
      raise ValueError("gate_mlp_layers must be >= 1")
    if self.impl not in IMPLS:
      raise ValueError(f"impl must be one of {IMPLS}, got {self.impl!r}")
    if self.impl == "fast" and self.processor not in FAST_PROCESSORS:
      raise ValueError(f"impl='fast' exists for {FAST_PROCESSORS} only, "
                       f"not {self.processor!r}; use impl='reference'")

  @property
  def fast(self) -> bool:
    """Whether the fast net computes it: impl 'fast', or 'auto' on a `FAST_PROCESSORS` processor."""
    return self.impl == "fast" or (self.impl == "auto" and
                                   self.processor in FAST_PROCESSORS)
