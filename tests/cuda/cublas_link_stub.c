/* What a program links against in place of NVIDIA's libcublas.so.13 (CI has none): the
 * symbols cublas_gemm.cu calls, under that soname. Never run: at run time the loader finds the
 * shim's libcublas.so.13 first on LD_LIBRARY_PATH. Built by ac_tests::cuda::build_with_cublas. */
void cublasCreate_v2(void) {}
void cublasDestroy_v2(void) {}
void cublasSetStream_v2(void) {}
void cublasGetVersion_v2(void) {}
void cublasGetStatusName(void) {}
void cublasSgemm_v2(void) {}
void cublasDgemm_v2(void) {}
void cublasSgemmStridedBatched(void) {}
void cublasGemmEx(void) {}
void cublasSetVector(void) {}
void cublasGetVector(void) {}
void cublasSetMatrix(void) {}
void cublasGetMatrix(void) {}
void cublasSaxpy_v2(void) {}
void cublasSgemmEx(void) {}
