"""Objectives: synthetic test functions with exact optima, noise models, client families."""

from fedxab.objectives.base import Objective
from fedxab.objectives.families import (
    AverageObjective,
    ClientFamily,
    OffsetObjective,
    ShiftedObjective,
    gp_sample_family,
    input_shift_family,
    value_offset_family,
)
from fedxab.objectives.gp import GPGrid, GridObjective
from fedxab.objectives.noise import (
    NOISE_MODELS,
    GaussianNoise,
    NoiseModel,
    NoNoise,
    TruncatedGaussianNoise,
    UniformNoise,
    make_noise,
)
from fedxab.objectives.optimize import BoxMaximum, known_maximizers, maximize_on_box
from fedxab.objectives.registry import OBJECTIVES, make_objective, objective_parameters
from fedxab.objectives.synthetic import (
    Ackley,
    DoubleSine,
    Garland,
    Himmelblau,
    Rastrigin,
    SineProduct,
    SyntheticObjective,
)
from fedxab.objectives.wrap import FunctionObjective

__all__ = [
    "NOISE_MODELS",
    "OBJECTIVES",
    "Ackley",
    "AverageObjective",
    "BoxMaximum",
    "ClientFamily",
    "DoubleSine",
    "FunctionObjective",
    "GPGrid",
    "Garland",
    "GaussianNoise",
    "GridObjective",
    "Himmelblau",
    "NoNoise",
    "NoiseModel",
    "Objective",
    "OffsetObjective",
    "Rastrigin",
    "ShiftedObjective",
    "SineProduct",
    "SyntheticObjective",
    "TruncatedGaussianNoise",
    "UniformNoise",
    "gp_sample_family",
    "input_shift_family",
    "known_maximizers",
    "make_noise",
    "make_objective",
    "maximize_on_box",
    "objective_parameters",
    "value_offset_family",
]
