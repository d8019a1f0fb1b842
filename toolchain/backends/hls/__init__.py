"""HLS C++ backend: learners (and later models) as C++ for Vitis HLS, C-simulated with g++ against the golden model."""
