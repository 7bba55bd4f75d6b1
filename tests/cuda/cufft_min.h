// The part of cuFFT's API (`cufft.h`, `cufftXt.h`) the tests call, declared as NVIDIA's headers
// declare it: CI has no cuFFT headers or library.
#pragma once
#include <cstddef>

extern "C" {
typedef int cufftHandle;
typedef enum {
    CUFFT_SUCCESS = 0x0,
    CUFFT_INVALID_PLAN = 0x1,
    CUFFT_INVALID_VALUE = 0x4,
    CUFFT_NOT_SUPPORTED = 0x10,
} cufftResult;
typedef enum { CUFFT_R2C = 0x2a, CUFFT_C2R = 0x2c, CUFFT_C2C = 0x29, CUFFT_D2Z = 0x6a, CUFFT_Z2D = 0x6c, CUFFT_Z2Z = 0x69 } cufftType;
typedef struct { float x, y; } cufftComplex;
typedef struct { double x, y; } cufftDoubleComplex;
#define CUFFT_FORWARD -1
#define CUFFT_INVERSE 1
enum {
    CUFFT_TEST_R_32F = 0,
    CUFFT_TEST_C_32F = 4,
    CUFFT_TEST_R_16F = 2,
    CUFFT_TEST_C_16F = 6,
    CUFFT_TEST_R_16BF = 14,
    CUFFT_TEST_C_16BF = 15
};

cufftResult cufftPlan1d(cufftHandle* plan, int nx, cufftType type, int batch);
cufftResult cufftPlan2d(cufftHandle* plan, int nx, int ny, cufftType type);
cufftResult cufftPlan3d(cufftHandle* plan, int nx, int ny, int nz, cufftType type);
cufftResult cufftPlanMany(cufftHandle* plan, int rank, int* n, int* inembed, int istride, int idist, int* onembed,
                          int ostride, int odist, cufftType type, int batch);
cufftResult cufftCreate(cufftHandle* plan);
cufftResult cufftDestroy(cufftHandle plan);
cufftResult cufftSetStream(cufftHandle plan, cudaStream_t stream);
cufftResult cufftExecC2C(cufftHandle plan, cufftComplex* idata, cufftComplex* odata, int direction);
cufftResult cufftExecR2C(cufftHandle plan, float* idata, cufftComplex* odata);
cufftResult cufftExecC2R(cufftHandle plan, cufftComplex* idata, float* odata);
cufftResult cufftExecZ2Z(cufftHandle plan, cufftDoubleComplex* idata, cufftDoubleComplex* odata, int direction);
cufftResult cufftXtMakePlanMany(cufftHandle plan, int rank, long long* n, long long* inembed, long long istride,
                                long long idist, int inputtype, long long* onembed, long long ostride, long long odist,
                                int outputtype, long long batch, size_t* workSize, int executiontype);
cufftResult cufftXtExec(cufftHandle plan, void* input, void* output, int direction);
cufftResult cufftEstimate1d(int nx, cufftType type, int batch, size_t* workSize);
cufftResult cufftEstimateMany(int rank, int* n, int* inembed, int istride, int idist, int* onembed, int ostride,
                              int odist, cufftType type, int batch, size_t* workSize);
cufftResult cufftGetSize1d(cufftHandle handle, int nx, cufftType type, int batch, size_t* workSize);
cufftResult cufftGetSize2d(cufftHandle handle, int nx, int ny, cufftType type, size_t* workSize);
cufftResult cufftGetSizeMany64(cufftHandle plan, int rank, long long* n, long long* inembed, long long istride,
                               long long idist, long long* onembed, long long ostride, long long odist, cufftType type,
                               long long batch, size_t* workSize);
cufftResult cufftXtGetSizeMany(cufftHandle plan, int rank, long long* n, long long* inembed, long long istride,
                               long long idist, int inputtype, long long* onembed, long long ostride, long long odist,
                               int outputtype, long long batch, size_t* workSize, int executiontype);
typedef enum {
    NVFFT_PLAN_PROPERTY_INT64_PATIENT_JIT = 0x1,
    NVFFT_PLAN_PROPERTY_INT64_MAX_NUM_HOST_THREADS = 0x2,
} cufftProperty;
cufftResult cufftSetPlanPropertyInt64(cufftHandle plan, cufftProperty property, const long long int inputValueInt);
cufftResult cufftGetPlanPropertyInt64(cufftHandle plan, cufftProperty property, long long int* returnPtrValue);
cufftResult cufftResetPlanProperty(cufftHandle plan, cufftProperty property);
typedef enum { CUFFT_WORKAREA_MINIMAL = 0, CUFFT_WORKAREA_USER = 1, CUFFT_WORKAREA_PERFORMANCE = 2 } cufftXtWorkAreaPolicy;
cufftResult cufftXtSetWorkAreaPolicy(cufftHandle plan, cufftXtWorkAreaPolicy policy, size_t* workSize);
}
