/* What a program links against in place of NVIDIA's libcublas.so.13 (CI has none): the
 * symbols the cublas_*.cu programs call, under that soname. Never run: at run time the loader finds the
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
void cublasSgemmEx(void) {}
void cublasSetPointerMode_v2(void) {}
void cublasSasum_v2(void) {}
void cublasSdot_v2(void) {}
void cublasDdot_v2(void) {}
void cublasSnrm2_v2(void) {}
void cublasDnrm2_v2(void) {}
void cublasSaxpy_v2(void) {}
void cublasDaxpy_v2(void) {}
void cublasScopy_v2(void) {}
void cublasDcopy_v2(void) {}
void cublasSscal_v2(void) {}
void cublasDscal_v2(void) {}
void cublasSgemv_v2(void) {}
void cublasDgemv_v2(void) {}
void cublasSger_v2(void) {}
void cublasDger_v2(void) {}
