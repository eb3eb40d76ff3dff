module gpupool.bench/floor

go 1.22
