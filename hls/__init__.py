"""HLS C++ templates used through hls4ml, shipped as package data."""
