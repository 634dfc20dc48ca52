"""gradtx.contrib: the optimizers of `optax.contrib`, under Optax's names and argument names.

Recent and research optimizers (Muon, schedule-free, Prodigy, D-Adaptation, DoG, Mechanic, COCOB,
Sophia, SAM, ADOPT, AdEMAMix, MADGRAD, MoMo, GaLore, AdaBelief-style ACProp, DP-SGD), complex
parameters as real pairs and reduce-on-plateau live here, as in Optax, so that
`optax.contrib.muon` becomes `gradtx.contrib.muon`; so do the optimizers Optax lacks: the matrix
optimizers (SOAP, Shampoo, PSGD-Kron, NorMuon, Dion, Scion) and the 2025 first-order set (MARS,
LaProp, cautious, Adam-mini, APOLLO, Fira). Each is a chain of public primitives where
the algorithm allows. The public API, re-exported explicitly; no logic here.
"""

# Optax keeps reduce_on_plateau in optax.contrib; gradtx's lives with the primitives.
from ..transforms._plateau import ReduceLROnPlateauState as ReduceLROnPlateauState
from ..transforms._plateau import reduce_on_plateau as reduce_on_plateau
from ._acprop import ScaleByAcpropState as ScaleByAcpropState
from ._acprop import acprop as acprop
from ._acprop import scale_by_acprop as scale_by_acprop
from ._adam_mini import ScaleByAdamMiniState as ScaleByAdamMiniState
from ._adam_mini import adam_mini as adam_mini
from ._adam_mini import scale_by_adam_mini as scale_by_adam_mini
from ._ademamix import ScaleByAdemamixState as ScaleByAdemamixState
from ._ademamix import ScaleBySimplifiedAdEMAMixState as ScaleBySimplifiedAdEMAMixState
from ._ademamix import ademamix as ademamix
from ._ademamix import scale_by_ademamix as scale_by_ademamix
from ._ademamix import scale_by_simplified_ademamix as scale_by_simplified_ademamix
from ._ademamix import simplified_ademamix as simplified_ademamix
from ._adopt import ScaleByAdoptState as ScaleByAdoptState
from ._adopt import adopt as adopt
from ._adopt import scale_by_adopt as scale_by_adopt
from ._apollo import ScaleByApolloState as ScaleByApolloState
from ._apollo import apollo as apollo
from ._apollo import scale_by_apollo as scale_by_apollo
from ._cautious import CautiousState as CautiousState
from ._cautious import cautious as cautious
from ._cautious import cautious_adamw as cautious_adamw
from ._cocob import COCOBState as COCOBState
from ._cocob import cocob as cocob
from ._cocob import scale_by_cocob as scale_by_cocob
from ._complex import SplitRealAndImaginaryArrays as SplitRealAndImaginaryArrays
from ._complex import SplitRealAndImaginaryState as SplitRealAndImaginaryState
from ._complex import split_real_and_imaginary as split_real_and_imaginary
from ._dadapt import DAdaptAdamWState as DAdaptAdamWState
from ._dadapt import dadapt_adamw as dadapt_adamw
from ._dimension_numbers import explain_matrix_axes as explain_matrix_axes
from ._dion import DionDimensionNumbers as DionDimensionNumbers
from ._dion import ScaleByDionState as ScaleByDionState
from ._dion import dion as dion
from ._dion import scale_by_dion as scale_by_dion
from ._dog import DoGState as DoGState
from ._dog import DoWGState as DoWGState
from ._dog import dog as dog
from ._dog import dowg as dowg
from ._dog import scale_by_dog as scale_by_dog
from ._dog import scale_by_dowg as scale_by_dowg
from ._fira import ScaleByFiraState as ScaleByFiraState
from ._fira import fira as fira
from ._fira import scale_by_fira as scale_by_fira
from ._galore import GaLoreDimensionNumbers as GaLoreDimensionNumbers
from ._galore import GaLoreState as GaLoreState
from ._galore import galore as galore
from ._galore import scale_by_galore as scale_by_galore
from ._kron import ScaleByKronState as ScaleByKronState
from ._kron import kron as kron
from ._kron import precond_update_prob_schedule as precond_update_prob_schedule
from ._kron import scale_by_kron as scale_by_kron
from ._laprop import ScaleByLapropState as ScaleByLapropState
from ._laprop import laprop as laprop
from ._laprop import scale_by_laprop as scale_by_laprop
from ._madgrad import MadgradState as MadgradState
from ._madgrad import madgrad as madgrad
from ._madgrad import scale_by_madgrad as scale_by_madgrad
from ._mars import ScaleByMarsState as ScaleByMarsState
from ._mars import mars as mars
from ._mars import scale_by_mars as scale_by_mars
from ._matrix_axes import STACK_AXIS_NAMES as STACK_AXIS_NAMES
from ._matrix_axes import MatrixAxes as MatrixAxes
from ._matrix_axes import infer_matrix_axes as infer_matrix_axes
from ._mechanic import MechanicState as MechanicState
from ._mechanic import mechanize as mechanize
from ._momo import MomoAdamState as MomoAdamState
from ._momo import MomoState as MomoState
from ._momo import momo as momo
from ._momo import momo_adam as momo_adam
from ._muon import MuonDimensionNumbers as MuonDimensionNumbers
from ._muon import MuonState as MuonState
from ._muon import muon as muon
from ._muon import scale_by_muon as scale_by_muon
from ._muon import scale_by_shape as scale_by_shape
from ._normuon import ScaleByNormuonState as ScaleByNormuonState
from ._normuon import normuon as normuon
from ._normuon import scale_by_normuon as scale_by_normuon
from ._privacy import DifferentiallyPrivateAggregateState as DifferentiallyPrivateAggregateState
from ._privacy import differentially_private_aggregate as differentially_private_aggregate
from ._privacy import dpsgd as dpsgd
from ._prodigy import ProdigyState as ProdigyState
from ._prodigy import prodigy as prodigy
from ._sam import NormalizeState as NormalizeState
from ._sam import SAMState as SAMState
from ._sam import normalize as normalize
from ._sam import sam as sam
from ._schedule_free import ScheduleFreeState as ScheduleFreeState
from ._schedule_free import schedule_free as schedule_free
from ._schedule_free import schedule_free_adamw as schedule_free_adamw
from ._schedule_free import schedule_free_eval_params as schedule_free_eval_params
from ._schedule_free import schedule_free_sgd as schedule_free_sgd
from ._scion import SCION_NORMS as SCION_NORMS
from ._scion import ScaleByScionState as ScaleByScionState
from ._scion import scale_by_scion as scale_by_scion
from ._scion import scion as scion
from ._shampoo import ScaleByShampooState as ScaleByShampooState
from ._shampoo import ShampooDimensionNumbers as ShampooDimensionNumbers
from ._shampoo import scale_by_shampoo as scale_by_shampoo
from ._shampoo import shampoo as shampoo
from ._soap import ScaleBySoapState as ScaleBySoapState
from ._soap import SoapDimensionNumbers as SoapDimensionNumbers
from ._soap import scale_by_soap as scale_by_soap
from ._soap import soap as soap
from ._sophia import HutchinsonState as HutchinsonState
from ._sophia import SophiaState as SophiaState
from ._sophia import hutchinson_estimator_diag_hessian as hutchinson_estimator_diag_hessian
from ._sophia import scale_by_sophia as scale_by_sophia
from ._sophia import sophia as sophia

__all__ = [
    "SCION_NORMS",
    "STACK_AXIS_NAMES",
    "COCOBState",
    "CautiousState",
    "DAdaptAdamWState",
    "DifferentiallyPrivateAggregateState",
    "DionDimensionNumbers",
    "DoGState",
    "DoWGState",
    "GaLoreDimensionNumbers",
    "GaLoreState",
    "HutchinsonState",
    "MadgradState",
    "MatrixAxes",
    "MechanicState",
    "MomoAdamState",
    "MomoState",
    "MuonDimensionNumbers",
    "MuonState",
    "NormalizeState",
    "ProdigyState",
    "ReduceLROnPlateauState",
    "SAMState",
    "ScaleByAcpropState",
    "ScaleByAdamMiniState",
    "ScaleByAdemamixState",
    "ScaleByAdoptState",
    "ScaleByApolloState",
    "ScaleByDionState",
    "ScaleByFiraState",
    "ScaleByKronState",
    "ScaleByLapropState",
    "ScaleByMarsState",
    "ScaleByNormuonState",
    "ScaleByScionState",
    "ScaleByShampooState",
    "ScaleBySimplifiedAdEMAMixState",
    "ScaleBySoapState",
    "ScheduleFreeState",
    "ShampooDimensionNumbers",
    "SoapDimensionNumbers",
    "SophiaState",
    "SplitRealAndImaginaryArrays",
    "SplitRealAndImaginaryState",
    "acprop",
    "adam_mini",
    "ademamix",
    "adopt",
    "apollo",
    "cautious",
    "cautious_adamw",
    "cocob",
    "dadapt_adamw",
    "differentially_private_aggregate",
    "dion",
    "dog",
    "dowg",
    "dpsgd",
    "explain_matrix_axes",
    "fira",
    "galore",
    "hutchinson_estimator_diag_hessian",
    "infer_matrix_axes",
    "kron",
    "laprop",
    "madgrad",
    "mars",
    "mechanize",
    "momo",
    "momo_adam",
    "muon",
    "normalize",
    "normuon",
    "precond_update_prob_schedule",
    "prodigy",
    "reduce_on_plateau",
    "sam",
    "scale_by_acprop",
    "scale_by_adam_mini",
    "scale_by_ademamix",
    "scale_by_adopt",
    "scale_by_apollo",
    "scale_by_cocob",
    "scale_by_dion",
    "scale_by_dog",
    "scale_by_dowg",
    "scale_by_fira",
    "scale_by_galore",
    "scale_by_kron",
    "scale_by_laprop",
    "scale_by_madgrad",
    "scale_by_mars",
    "scale_by_muon",
    "scale_by_normuon",
    "scale_by_scion",
    "scale_by_shampoo",
    "scale_by_shape",
    "scale_by_simplified_ademamix",
    "scale_by_soap",
    "scale_by_sophia",
    "schedule_free",
    "schedule_free_adamw",
    "schedule_free_eval_params",
    "schedule_free_sgd",
    "scion",
    "shampoo",
    "simplified_ademamix",
    "soap",
    "sophia",
    "split_real_and_imaginary",
]
