"""Package data: the HLS C++ headers of bitforge's hls4ml extension layers and online learners (see README.md)."""
