"""Client similarity: oracle, cosine, functional, EMD; random-projection sketches; the 3DG.

References:
  Wang et al., "FedGS: Federated Graph-based Sampling with Arbitrary Client
  Availability", AAAI 2023; Huang et al., FedEMD (Mavericks).
"""

from fedjax_sel.similarity.emd import SinkhornResult as SinkhornResult
from fedjax_sel.similarity.emd import emd as emd
from fedjax_sel.similarity.emd import emd_1d as emd_1d
from fedjax_sel.similarity.emd import emd_general as emd_general
from fedjax_sel.similarity.emd import emd_matrix as emd_matrix
from fedjax_sel.similarity.emd import line_cost as line_cost
from fedjax_sel.similarity.emd import sinkhorn as sinkhorn
from fedjax_sel.similarity.emd import zero_one_cost as zero_one_cost
from fedjax_sel.similarity.graph import ThreeDG as ThreeDG
from fedjax_sel.similarity.graph import adjacency_3dg as adjacency_3dg
from fedjax_sel.similarity.graph import build_3dg as build_3dg
from fedjax_sel.similarity.graph import floyd_warshall as floyd_warshall
from fedjax_sel.similarity.graph import graph_edges as graph_edges
from fedjax_sel.similarity.graph import graph_f1 as graph_f1
from fedjax_sel.similarity.graph import normalize_distances as normalize_distances
from fedjax_sel.similarity.graph import scaled_adjacency_3dg as scaled_adjacency_3dg
from fedjax_sel.similarity.measures import cosine as cosine
from fedjax_sel.similarity.measures import cosine_chunked as cosine_chunked
from fedjax_sel.similarity.measures import cosine_cross as cosine_cross
from fedjax_sel.similarity.measures import functional as functional
from fedjax_sel.similarity.measures import functional_embedding as functional_embedding
from fedjax_sel.similarity.measures import label_distribution as label_distribution
from fedjax_sel.similarity.measures import minmax_normalize as minmax_normalize
from fedjax_sel.similarity.measures import (
  model_parameter_similarity as model_parameter_similarity,
)
from fedjax_sel.similarity.measures import noise_inputs as noise_inputs
from fedjax_sel.similarity.sketch import flatten_stacked as flatten_stacked
from fedjax_sel.similarity.sketch import is_exact as is_exact
from fedjax_sel.similarity.sketch import jl_cosine_error_bound as jl_cosine_error_bound
from fedjax_sel.similarity.sketch import make_projection as make_projection
from fedjax_sel.similarity.sketch import num_params as num_params
from fedjax_sel.similarity.sketch import sketch as sketch
