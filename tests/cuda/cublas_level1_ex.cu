// cuBLAS's level-1 Ex forms, matinvBatched, grouped batched gemms, and a handle's settings and
// loggers, from a plain CUDA program linked against libcublas.so.13 and libcublasLt.so.13:
// - AxpyEx, ScalEx, CopyEx and Nrm2Ex on f32, f64 and complex vectors and on binary16 and
//   bfloat16 ones (f32 scalars, or ScalEx's of their own type), strided, their gaps checked;
// - SwapEx, AsumEx, IamaxEx, IaminEx (and IamaxEx_64), RotEx (Crot's complex s and Csrot's
//   real one), RotmEx, RotgEx and RotmgEx, each against its typed form run on the same values;
// - S, D and Z matinvBatched on integer matrices with integer inverses (A left as it was, a
//   singular matrix's info);
// - Sgemm, Dgemm and GemmEx grouped batched (and Sgemm's ILP64 form), two groups of different
//   shapes, operations and scalars;
// - the atomics mode, the emulation strategy and fixed-point controls kept and answered, a
//   value out of range refused; cuBLAS's logger callback given each call's name until logging
//   is configured off; cuBLASLt's callback given API trace lines at level 5, none after
//   cublasLtLoggerForceDisable.
// Every result is exact (small integers: every product and sum is exact, in binary16 too; and
// norms and rotations of Pythagorean values) but complex inverses, within 1e-12.
// Usage: cublas_level1_ex [--native] (--native: leaves out the refusals of what the shim does
// not serve, which cuBLAS may)
#include <complex>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cublas_helpers.h"
#include "cublas_typed.h"
#include "cublaslt_min.h"

extern "C" {
cublasStatus_t cublasAxpyEx(cublasHandle_t, int, const void*, int, const void*, int, int, void*, int, int, int);
cublasStatus_t cublasScalEx(cublasHandle_t, int, const void*, int, void*, int, int, int);
cublasStatus_t cublasCopyEx(cublasHandle_t, int, const void*, int, int, void*, int, int);
cublasStatus_t cublasSwapEx(cublasHandle_t, int, void*, int, int, void*, int, int);
cublasStatus_t cublasNrm2Ex(cublasHandle_t, int, const void*, int, int, void*, int, int);
cublasStatus_t cublasAsumEx(cublasHandle_t, int, const void*, int, int, void*, int, int);
cublasStatus_t cublasIamaxEx(cublasHandle_t, int, const void*, int, int, int*);
cublasStatus_t cublasIaminEx(cublasHandle_t, int, const void*, int, int, int*);
cublasStatus_t cublasIamaxEx_64(cublasHandle_t, int64_t, const void*, int, int64_t, int64_t*);
cublasStatus_t cublasRotEx(cublasHandle_t, int, void*, int, int, void*, int, int, const void*, const void*, int, int);
cublasStatus_t cublasRotmEx(cublasHandle_t, int, void*, int, int, void*, int, int, const void*, int, int);
cublasStatus_t cublasRotgEx(cublasHandle_t, void*, void*, int, void*, void*, int, int);
cublasStatus_t cublasRotmgEx(cublasHandle_t, void*, int, void*, int, void*, int, const void*, int, void*, int, int);
cublasStatus_t cublasCrot_v2(cublasHandle_t, int, void*, int, void*, int, const void*, const void*);
cublasStatus_t cublasCsrot_v2(cublasHandle_t, int, void*, int, void*, int, const void*, const void*);
cublasStatus_t cublasDrotm_v2(cublasHandle_t, int, void*, int, void*, int, const void*);
cublasStatus_t cublasSrotg_v2(cublasHandle_t, void*, void*, void*, void*);
cublasStatus_t cublasZrotg_v2(cublasHandle_t, void*, void*, void*, void*);
cublasStatus_t cublasDrotmg_v2(cublasHandle_t, void*, void*, void*, const void*, void*);
#define MATINV(name) cublasStatus_t name(cublasHandle_t, int, const void* const*, int, void* const*, int, int*, int);
MATINV(cublasSmatinvBatched) MATINV(cublasDmatinvBatched) MATINV(cublasZmatinvBatched)
#define GROUPED(name, I)                                                                                         \
    cublasStatus_t name(cublasHandle_t, const int*, const int*, const I*, const I*, const I*, const void*,        \
                        const void* const*, const I*, const void* const*, const I*, const void*, void* const*, \
                        const I*, I, const I*);
GROUPED(cublasSgemmGroupedBatched, int) GROUPED(cublasDgemmGroupedBatched, int)
GROUPED(cublasSgemmGroupedBatched_64, int64_t)
cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t, const int*, const int*, const int*, const int*, const int*,
                                          const void*, const void* const*, int, const int*, const void* const*, int,
                                          const int*, const void*, void* const*, int, const int*, int, const int*,
                                          int);
cublasStatus_t cublasSetAtomicsMode(cublasHandle_t, int);
cublasStatus_t cublasGetAtomicsMode(cublasHandle_t, int*);
cublasStatus_t cublasSetEmulationStrategy(cublasHandle_t, int);
cublasStatus_t cublasGetEmulationStrategy(cublasHandle_t, int*);
cublasStatus_t cublasGetEmulationSpecialValuesSupport(cublasHandle_t, int*);
cublasStatus_t cublasSetFixedPointEmulationMantissaControl(cublasHandle_t, int);
cublasStatus_t cublasGetFixedPointEmulationMantissaControl(cublasHandle_t, int*);
cublasStatus_t cublasSetFixedPointEmulationMaxMantissaBitCount(cublasHandle_t, int);
cublasStatus_t cublasGetFixedPointEmulationMaxMantissaBitCount(cublasHandle_t, int*);
cublasStatus_t cublasSetFixedPointEmulationMantissaBitCountPointer(cublasHandle_t, int*);
cublasStatus_t cublasGetFixedPointEmulationMantissaBitCountPointer(cublasHandle_t, int**);
cublasStatus_t cublasLoggerConfigure(int, int, int, const char*);
cublasStatus_t cublasSetLoggerCallback(void (*)(const char*));
cublasStatus_t cublasGetLoggerCallback(void (**)(const char*));
cublasStatus_t cublasLtLoggerSetCallback(void (*)(int, const char*, const char*));
cublasStatus_t cublasLtLoggerSetLevel(int);
cublasStatus_t cublasLtLoggerForceDisable();
}

enum { R_32F = 0, R_64F = 1, R_16F = 2, C_32F = 4, C_64F = 5, R_16BF = 14, COMPUTE_32F = 68 };

static void status_line(const char* what, cublasStatus_t s) { printf("%s: %d %s\n", what, (int)s, cublasGetStatusName(s)); }

// A half-precision vector's bits from floats, and back: binary16 (`bf` false) or bfloat16.
static std::vector<unsigned short> narrow_of(const std::vector<float>& v, bool bf) {
    std::vector<unsigned short> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = bf ? bfloat16_of(v[i]) : half_of(v[i]);
    return out;
}
static std::vector<float> widened(const std::vector<unsigned short>& v, bool bf) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = bf ? float_of_bfloat16(v[i]) : float_of_half(v[i]);
    return out;
}

// y = alpha x + y over n elements (x incx apart, y incy apart), as the host computes it.
template <typename E>
static void axpy_ref(int n, E alpha, const std::vector<E>& x, int incx, std::vector<E>& y, int incy) {
    for (int i = 0; i < n; i++) y[i * incy] = alpha * x[i * incx] + y[i * incy];
}

// AxpyEx, CopyEx and ScalEx on typed vectors of cudaDataType t (x 2 apart, y 3 apart).
template <typename E>
static bool typed_forms(cublasHandle_t h, const char* name, int t) {
    const int n = 5;
    auto x = values<E>(2 * n, 1), y = values<E>(3 * n, 2);
    E alpha = make<E>(2, -1);
    auto want = y;
    axpy_ref(n, alpha, x, 2, want, 3);
    E *dx = upload(x), *dy = upload(y);
    CUBLAS(cublasAxpyEx(h, n, &alpha, t, dx, t, 2, dy, t, 3, t));
    std::string what = std::string(name) + " AxpyEx strided";
    bool ok = exact(what.c_str(), download(dy, want.size()), want);
    // CopyEx: y's elements become x's, its gaps stay.
    for (int i = 0; i < n; i++) want[i * 3] = x[i * 2];
    CUBLAS(cublasCopyEx(h, n, dx, t, 2, dy, t, 3));
    what = std::string(name) + " CopyEx strided";
    ok &= exact(what.c_str(), download(dy, want.size()), want);
    // ScalEx: x scaled in place, by a scalar of its type.
    E beta = make<E>(-3, 2);
    auto scaled = x;
    for (int i = 0; i < n; i++) scaled[i * 2] = beta * x[i * 2];
    CUBLAS(cublasScalEx(h, n, &beta, t, dx, t, 2, t));
    what = std::string(name) + " ScalEx strided";
    ok &= exact(what.c_str(), download(dx, scaled.size()), scaled);
    for (E* p : {dx, dy}) CHECK(cudaFree(p));
    return ok;
}

// ScalEx of a complex f32 vector by a real scalar (Csscal).
static bool scal_by_real(cublasHandle_t h) {
    auto x = values<c32>(8, 3);
    float alpha = -2;
    auto want = x;
    for (int i = 0; i < 4; i++) want[i * 2] = alpha * x[i * 2];
    c32* dx = upload(x);
    CUBLAS(cublasScalEx(h, 4, &alpha, R_32F, dx, C_32F, 2, C_32F));
    bool ok = exact("c32 ScalEx by a real", download(dx, want.size()), want);
    CHECK(cudaFree(dx));
    return ok;
}

// AxpyEx, ScalEx (an f32 scalar, then one of the vectors' type) and CopyEx on binary16 or
// bfloat16 vectors, computed in f32.
static bool narrow_forms(cublasHandle_t h, bool bf) {
    const char* name = bf ? "bf16" : "f16";
    int t = bf ? R_16BF : R_16F;
    const int n = 6;
    std::vector<float> x(2 * n), y(2 * n);
    for (int i = 0; i < 2 * n; i++) x[i] = (float)(i % 5 - 2), y[i] = (float)(3 - i % 4);
    float alpha = 3;
    auto want = y;
    axpy_ref(n, alpha, x, 1, want, 2);
    auto hx = narrow_of(x, bf), hy = narrow_of(y, bf);
    unsigned short *dx = upload(hx), *dy = upload(hy);
    CUBLAS(cublasAxpyEx(h, n, &alpha, R_32F, dx, t, 1, dy, t, 2, R_32F));
    std::string what = std::string(name) + " AxpyEx";
    bool ok = exact(what.c_str(), widened(download(dy, want.size()), bf), want);
    float scale = -2;
    for (int i = 0; i < n; i++) want[i * 2] *= scale;
    CUBLAS(cublasScalEx(h, n, &scale, R_32F, dy, t, 2, R_32F));
    unsigned short own = bf ? bfloat16_of(0.5f) : half_of(0.5f);
    for (int i = 0; i < n; i++) want[i * 2] *= 0.5f;
    CUBLAS(cublasScalEx(h, n, &own, t, dy, t, 2, R_32F));
    what = std::string(name) + " ScalEx by f32 and by its own type";
    ok &= exact(what.c_str(), widened(download(dy, want.size()), bf), want);
    for (int i = 0; i < n; i++) want[i * 2] = x[i];
    CUBLAS(cublasCopyEx(h, n, dx, t, 1, dy, t, 2));
    what = std::string(name) + " CopyEx";
    ok &= exact(what.c_str(), widened(download(dy, want.size()), bf), want);
    for (unsigned short* p : {dx, dy}) CHECK(cudaFree(p));
    return ok;
}

// Nrm2Ex of Pythagorean values: f32 (3, 4, 12 -> 13), complex f64 (3+4i, 12i -> 13, a real
// f64 result), binary16 (13 in binary16), strided 2 apart with NaN in the gaps.
static bool norms(cublasHandle_t h) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> xf = {3, nan, 4, nan, 12};
    float* df = upload(xf);
    float rf = 0;
    CUBLAS(cublasNrm2Ex(h, 3, df, R_32F, 2, &rf, R_32F, R_32F));
    bool ok = equal("f32 Nrm2Ex", rf, 13.0f);
    std::vector<c64> xz = {c64(3, 4), c64(nan, nan), c64(0, 12)};
    c64* dz = upload(xz);
    double rz = 0;
    CUBLAS(cublasNrm2Ex(h, 2, dz, C_64F, 2, &rz, R_64F, R_64F));
    ok &= equal("c64 Nrm2Ex", rz, 13.0);
    auto xh = narrow_of(xf, false);
    unsigned short* dh = upload(xh);
    unsigned short rh = 0;
    CUBLAS(cublasNrm2Ex(h, 3, dh, R_16F, 2, &rh, R_16F, R_32F));
    ok &= equal("f16 Nrm2Ex", float_of_half(rh), 13.0f);
    CHECK(cudaFree(df));
    CHECK(cudaFree(dz));
    CHECK(cudaFree(dh));
    return ok;
}

// SwapEx, AsumEx, IamaxEx, IaminEx and IamaxEx_64, each against its expected values.
static bool swaps_and_reductions(cublasHandle_t h) {
    auto x = values<double>(10, 4), y = values<double>(15, 5);
    auto wx = x, wy = y;
    for (int i = 0; i < 5; i++) std::swap(wx[i * 2], wy[i * 3]);
    double *dx = upload(x), *dy = upload(y);
    CUBLAS(cublasSwapEx(h, 5, dx, R_64F, 2, dy, R_64F, 3));
    bool ok = exact("f64 SwapEx x", download(dx, wx.size()), wx) & exact("f64 SwapEx y", download(dy, wy.size()), wy);
    std::vector<c32> z = {c32(1, -2), c32(-4, 0), c32(2, 2), c32(0, -4), c32(1, 1)};
    c32* dz = upload(z);
    float sum = 0;
    CUBLAS(cublasAsumEx(h, 5, dz, C_32F, 1, &sum, R_32F, R_32F));
    ok &= equal("c32 AsumEx", sum, 3.0f + 4 + 4 + 4 + 2);
    int largest = 0, least = 0;
    CUBLAS(cublasIamaxEx(h, 5, dz, C_32F, 1, &largest));
    CUBLAS(cublasIaminEx(h, 5, dz, C_32F, 1, &least));
    ok &= equal("c32 IamaxEx first of equals", largest, 2) & equal("c32 IaminEx", least, 5);
    int64_t wide = -1;
    CUBLAS(cublasIamaxEx_64(h, 5, dz, C_32F, 1, &wide));
    ok &= equal("c32 IamaxEx_64", (double)wide, 2.0);
    for (void* p : {(void*)dx, (void*)dy, (void*)dz}) CHECK(cudaFree(p));
    return ok;
}

// RotEx against Crot (complex s) and Csrot (real s), RotmEx against Drotm: each pair run on
// copies of the same vectors must agree exactly.
static bool rotations(cublasHandle_t h) {
    auto x = values<c32>(8, 6), y = values<c32>(12, 7);
    c32 *ax = upload(x), *ay = upload(y), *bx = upload(x), *by = upload(y);
    float c = 2;
    c32 s(1, -1);
    CUBLAS(cublasRotEx(h, 4, ax, C_32F, 2, ay, C_32F, 3, &c, &s, C_32F, C_32F));
    CUBLAS(cublasCrot_v2(h, 4, bx, 2, by, 3, &c, &s));
    bool ok = exact("c32 RotEx as Crot", download(ax, 8), download(bx, 8)) &
              exact("c32 RotEx as Crot (y)", download(ay, 12), download(by, 12));
    float rs = -3;
    CUBLAS(cublasRotEx(h, 4, ax, C_32F, 2, ay, C_32F, 3, &c, &rs, R_32F, C_32F));
    CUBLAS(cublasCsrot_v2(h, 4, bx, 2, by, 3, &c, &rs));
    ok &= exact("c32 RotEx as Csrot", download(ax, 8), download(bx, 8)) &
          exact("c32 RotEx as Csrot (y)", download(ay, 12), download(by, 12));
    auto u = values<double>(6, 8), v = values<double>(6, 9);
    double *du = upload(u), *dv = upload(v), *eu = upload(u), *ev = upload(v);
    double param[5] = {-1, 2, -1, 3, 1};
    CUBLAS(cublasRotmEx(h, 6, du, R_64F, 1, dv, R_64F, 1, param, R_64F, R_64F));
    CUBLAS(cublasDrotm_v2(h, 6, eu, 1, ev, 1, param));
    ok &= exact("f64 RotmEx as Drotm", download(du, 6), download(eu, 6)) &
          exact("f64 RotmEx as Drotm (y)", download(dv, 6), download(ev, 6));
    for (void* p : {(void*)ax, (void*)ay, (void*)bx, (void*)by, (void*)du, (void*)dv, (void*)eu, (void*)ev})
        CHECK(cudaFree(p));
    // RotgEx against Srotg and Zrotg, RotmgEx against Drotmg, on the host.
    float a1 = 3, b1 = 4, c1, s1, a2 = 3, b2 = 4, c2, s2;
    CUBLAS(cublasRotgEx(h, &a1, &b1, R_32F, &c1, &s1, R_32F, R_32F));
    CUBLAS(cublasSrotg_v2(h, &a2, &b2, &c2, &s2));
    ok &= equal("f32 RotgEx r", a1, 5.0f) & equal("f32 RotgEx as Srotg", c1 == c2 && s1 == s2 && b1 == b2, true);
    c64 za(3, 4), zb(0, 12), zs, za2 = za, zb2 = zb, zs2;
    double zc, zc2;
    CUBLAS(cublasRotgEx(h, &za, &zb, C_64F, &zc, &zs, C_64F, C_64F));
    CUBLAS(cublasZrotg_v2(h, &za2, &zb2, &zc2, &zs2));
    ok &= equal("c64 RotgEx as Zrotg", za == za2 && zc == zc2 && zs == zs2, true);
    double d[2][5] = {{4, 1, 2, 0, 0}, {4, 1, 2, 0, 0}}, y1 = 3, p1[5] = {9, 9, 9, 9, 9}, p2[5] = {9, 9, 9, 9, 9};
    CUBLAS(cublasRotmgEx(h, &d[0][0], R_64F, &d[0][1], R_64F, &d[0][2], R_64F, &y1, R_64F, p1, R_64F, R_64F));
    CUBLAS(cublasDrotmg_v2(h, &d[1][0], &d[1][1], &d[1][2], &y1, p2));
    ok &= equal("f64 RotmgEx as Drotmg", memcmp(d[0], d[1], 3 * sizeof(double)) == 0 && memcmp(p1, p2, sizeof p1) == 0, true);
    return ok;
}

// Whether got is want: exactly for real matrices (whose pivots here are 1: no row is ever
// swapped); within 1e-12 of each element's magnitude for complex ones, whose partial pivoting
// picks pivots of magnitude above 1 and so divides (cuBLAS's would as well).
template <typename E>
static bool close_to(const char* what, const std::vector<E>& got, const std::vector<E>& want) {
    if (!std::is_same<E, c64>::value) return exact(what, got, want);
    for (size_t i = 0; i < want.size(); i++)
        if (std::abs(got[i] - want[i]) > 1e-12 * (1 + std::abs(want[i]))) {
            printf("%s: element %zu is %g%+gi, expected %g%+gi\n", what, i, std::real(got[i]), std::imag(got[i]),
                   std::real(want[i]), std::imag(want[i]));
            return false;
        }
    printf("%s within 1e-12\n", what);
    return true;
}

// matinvBatched of two n x n matrices (ld n + 1, their inverses' n + 2, the padding checked)
// with integer inverses: A = L U, unit
// triangles of small integers; Ainv computed here as U^-1 L^-1 by substitution (exact).
template <typename E>
static bool matinv(cublasHandle_t h, const char* name,
                   cublasStatus_t (*f)(cublasHandle_t, int, const void* const*, int, void* const*, int, int*, int)) {
    const int n = 4, lda = n + 1, ldi = n + 2, count = 2;
    std::vector<E> a(lda * n * count, make<E>(77, 77)), want(ldi * n * count, make<E>(-5, 5));
    auto inv = want;
    for (int b = 0; b < count; b++) {
        E L[n][n] = {}, U[n][n] = {}, Li[n][n] = {}, Ui[n][n] = {};
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                L[i][j] = i == j ? make<E>(1, 0) : i > j ? make<E>((i + j + b) % 3 - 1, (i + b) % 2) : make<E>(0, 0);
                U[i][j] = i == j ? make<E>(1, 0) : i < j ? make<E>((i * 2 + j + b) % 3 - 1, j % 2) : make<E>(0, 0);
            }
        // Inverses of unit triangles by substitution: integers throughout.
        for (int j = 0; j < n; j++) {
            for (int i = 0; i < n; i++) {
                E acc = i == j ? make<E>(1, 0) : make<E>(0, 0);
                for (int k = 0; k < i; k++) acc -= L[i][k] * Li[k][j];
                Li[i][j] = acc;
            }
            for (int i = n - 1; i >= 0; i--) {
                E acc = i == j ? make<E>(1, 0) : make<E>(0, 0);
                for (int k = i + 1; k < n; k++) acc -= U[i][k] * Ui[k][j];
                Ui[i][j] = acc;
            }
        }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                E ij = make<E>(0, 0), inv_ij = make<E>(0, 0);
                for (int k = 0; k < n; k++) ij += L[i][k] * U[k][j], inv_ij += Ui[i][k] * Li[k][j];
                a[b * lda * n + i + j * lda] = ij;
                want[b * ldi * n + i + j * ldi] = inv_ij;
            }
    }
    E *da = upload(a), *dinv = upload(inv);
    std::vector<const E*> as = {da, da + lda * n};
    std::vector<E*> invs = {dinv, dinv + ldi * n};
    const E** das = upload(as);
    E** dinvs = upload(invs);
    int* dinfo = upload(std::vector<int>(count, -7));
    CUBLAS(f(h, n, (const void* const*)das, lda, (void* const*)dinvs, ldi, dinfo, count));
    std::string what = std::string(name) + "matinvBatched";
    bool ok = close_to(what.c_str(), download(dinv, want.size()), want);
    what = std::string(name) + "matinvBatched leaves A";
    ok &= exact(what.c_str(), download(da, a.size()), a);
    auto info = download(dinfo, count);
    what = std::string(name) + "matinvBatched info";
    ok &= equal(what.c_str(), info[0] == 0 && info[1] == 0, true);
    // A singular matrix (its third column zero): info 3, as getrf's.
    auto singular = a;
    for (int i = 0; i < n; i++) singular[i + 2 * lda] = make<E>(0, 0);
    CHECK(cudaMemcpy(da, singular.data(), singular.size() * sizeof(E), cudaMemcpyHostToDevice));
    CUBLAS(f(h, n, (const void* const*)das, lda, (void* const*)dinvs, ldi, dinfo, 1));
    what = std::string(name) + "matinvBatched of a singular matrix: info";
    ok &= equal(what.c_str(), download(dinfo, 1)[0], 3);
    for (void* p : {(void*)da, (void*)dinv, (void*)das, (void*)dinvs, (void*)dinfo}) CHECK(cudaFree(p));
    return ok;
}

// One group's parameters and its products' matrices (host copies and where they are).
struct Group {
    int ta, tb, m, n, k, count;
    float alpha, beta;
};

// A grouped batched gemm of two groups (two products of 3 x 2 x 4, N N; one of 2 x 3 x 2, T N),
// its matrices in one allocation each, checked against the reference gemm: `E` the element
// type (float, double; or binary16 A and B with f32 C: `half_ab`), `I` the arrays' int type.
template <typename E, typename I, typename Call>
static bool grouped(const char* what, bool half_ab, Call call) {
    Group g[2] = {{0, 0, 3, 2, 4, 2, 1, 0}, {1, 0, 2, 3, 2, 1, 2, -1}};
    std::vector<size_t> at_a, at_b, at_c;
    size_t na = 0, nb = 0, nc = 0;
    for (auto& q : g)
        for (int i = 0; i < q.count; i++) {
            at_a.push_back(na), at_b.push_back(nb), at_c.push_back(nc);
            na += q.m * q.k + 3, nb += q.k * q.n + 1, nc += q.m * q.n + 2;
        }
    auto a = small_integers<float>(na, 1), b = small_integers<float>(nb, 2), c = small_integers<float>(nc, 3);
    auto want = c;
    size_t p = 0;
    for (auto& q : g)
        for (int i = 0; i < q.count; i++, p++) {
            int lda = q.ta ? q.k : q.m;
            reference(q.ta, q.tb, q.m, q.n, q.k, q.alpha, &a[at_a[p]], lda, &b[at_b[p]], q.k, q.beta, &want[at_c[p]], q.m);
        }
    size_t width = half_ab ? 2 : sizeof(E);
    char *da, *db;
    E* dc;
    std::vector<unsigned short> ha = halves_of(a), hb = halves_of(b);
    std::vector<E> ea(a.begin(), a.end()), eb(b.begin(), b.end()), ec(c.begin(), c.end());
    da = half_ab ? (char*)upload(ha) : (char*)upload(ea);
    db = half_ab ? (char*)upload(hb) : (char*)upload(eb);
    dc = upload(ec);
    std::vector<const void*> pa, pb;
    std::vector<void*> pc;
    for (size_t i = 0; i < at_a.size(); i++)
        pa.push_back(da + at_a[i] * width), pb.push_back(db + at_b[i] * width), pc.push_back(dc + at_c[i]);
    const void** dpa = upload(pa);
    const void** dpb = upload(pb);
    void** dpc = upload(pc);
    int ta[2] = {g[0].ta, g[1].ta}, tb[2] = {g[0].tb, g[1].tb};
    I m[2] = {g[0].m, g[1].m}, n[2] = {g[0].n, g[1].n}, k[2] = {g[0].k, g[1].k};
    I lda[2] = {g[0].ta ? g[0].k : g[0].m, g[1].ta ? g[1].k : g[1].m}, ldb[2] = {g[0].k, g[1].k}, ldc[2] = {g[0].m, g[1].m};
    I sizes[2] = {g[0].count, g[1].count};
    E alpha[2] = {(E)g[0].alpha, (E)g[1].alpha}, beta[2] = {(E)g[0].beta, (E)g[1].beta};
    CUBLAS(call(ta, tb, m, n, k, alpha, dpa, lda, dpb, ldb, beta, dpc, ldc, (I)2, sizes));
    std::vector<E> ewant(want.begin(), want.end());
    bool ok = exact(what, download(dc, ewant.size()), ewant);
    for (void* q : {(void*)da, (void*)db, (void*)dc, (void*)dpa, (void*)dpb, (void*)dpc}) CHECK(cudaFree(q));
    return ok;
}

// The handle's atomics mode, emulation strategy and fixed-point controls: kept and answered.
static bool settings(cublasHandle_t h) {
    int v = -1, special = 0;
    CUBLAS(cublasSetAtomicsMode(h, 1));
    CUBLAS(cublasGetAtomicsMode(h, &v));
    bool ok = v == 1;
    CUBLAS(cublasSetEmulationStrategy(h, 2));
    CUBLAS(cublasGetEmulationStrategy(h, &v));
    ok &= v == 2;
    CUBLAS(cublasGetEmulationSpecialValuesSupport(h, &special));
    ok &= special == 0xFFFF;
    CUBLAS(cublasSetFixedPointEmulationMantissaControl(h, 1));
    CUBLAS(cublasGetFixedPointEmulationMantissaControl(h, &v));
    ok &= v == 1;
    CUBLAS(cublasSetFixedPointEmulationMaxMantissaBitCount(h, 40));
    CUBLAS(cublasGetFixedPointEmulationMaxMantissaBitCount(h, &v));
    ok &= v == 40;
    int* bits = nullptr;
    CHECK(cudaMalloc(&bits, sizeof(int)));
    int* got = nullptr;
    CUBLAS(cublasSetFixedPointEmulationMantissaBitCountPointer(h, bits));
    CUBLAS(cublasGetFixedPointEmulationMantissaBitCountPointer(h, &got));
    ok &= got == bits;
    CUBLAS(cublasSetFixedPointEmulationMantissaBitCountPointer(h, nullptr));
    CHECK(cudaFree(bits));
    CUBLAS(cublasSetEmulationStrategy(h, 0));
    CUBLAS(cublasSetAtomicsMode(h, 0));
    report(ok, "atomics mode, emulation strategy and fixed-point controls kept");
    status_line("emulation strategy 3", cublasSetEmulationStrategy(h, 3));
    return ok;
}

static std::vector<std::string> logged;
static void on_log(const char* line) { logged.push_back(line); }
// A callback that calls cuBLAS itself (its call must not be logged into it again).
static int reentered = 0;
static void on_log_calling_cublas(const char* line) {
    void (*current)(const char*) = nullptr;
    cublasGetLoggerCallback(&current);
    reentered += current == on_log_calling_cublas;
    logged.push_back(line);
}
static int lt_api_lines = 0;
static void on_lt_log(int level, const char* function, const char*) {
    if (level == 5 && strstr(function, "cublasLtMatmulDescCreate")) lt_api_lines++;
}

// How many lines logged so far name `function`.
static int lines_naming(const char* function) {
    int n = 0;
    for (auto& line : logged) n += strstr(line.c_str(), function) != nullptr;
    return n;
}

// cuBLAS's logger callback sees each call by name until logging is configured off; cuBLASLt's
// sees API trace lines at level 5 until it is disabled for good.
static bool loggers(cublasHandle_t h, bool native) {
    std::vector<float> x = {3, 4};
    float* dx = upload(x);
    float r = 0;
    void (*before)(const char*) = nullptr;
    CUBLAS(cublasSetLoggerCallback(on_log));
    CUBLAS(cublasGetLoggerCallback(&before));
    CUBLAS(cublasSnrm2_v2(h, 2, dx, 1, &r));
    CUBLAS(cublasSnrm2_v2(h, 2, dx, 1, &r));
    bool ok = before == on_log && lines_naming("cublasSnrm2") == 2;
    // A failed call is logged as failed too (in the shim's words).
    cublasSetEmulationStrategy(h, 3);
    ok &= native || lines_naming("failed") == 1;
    // A callback that calls cuBLAS: its own call is not logged (it would recurse); the
    // program's own cublasGetLoggerCallback above was.
    CUBLAS(cublasSetLoggerCallback(on_log_calling_cublas));
    CUBLAS(cublasSnrm2_v2(h, 2, dx, 1, &r));
    ok &= reentered == 1 && lines_naming("cublasSnrm2") == 3 && lines_naming("cublasGetLoggerCallback") == 1;
    CUBLAS(cublasLoggerConfigure(0, 0, 0, nullptr));
    CUBLAS(cublasSnrm2_v2(h, 2, dx, 1, &r));
    ok &= lines_naming("cublasSnrm2") == 3;
    report(ok, "cuBLAS logger callback: 3 calls and a failure logged, none once off");
    CUBLAS(cublasSetLoggerCallback(nullptr));
    CUBLAS(cublasLoggerConfigure(0, 0, 0, nullptr));
    CHECK(cudaFree(dx));

    CUBLAS(cublasLtLoggerSetCallback(on_lt_log));
    CUBLAS(cublasLtLoggerSetLevel(5));
    cublasLtMatmulDesc_t desc;
    CUBLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, R_32F));
    CUBLAS(cublasLtMatmulDescDestroy(desc));
    int seen = lt_api_lines;
    CUBLAS(cublasLtLoggerForceDisable());
    CUBLAS(cublasLtLoggerSetLevel(5));
    CUBLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, R_32F));
    CUBLAS(cublasLtMatmulDescDestroy(desc));
    bool lt = seen >= 1 && lt_api_lines == seen;
    report(lt, "cuBLASLt logger: API trace at level 5, none after ForceDisable");
    return ok & lt;
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = typed_forms<float>(h, "f32", R_32F) & typed_forms<double>(h, "f64", R_64F);
    ok &= typed_forms<c32>(h, "c32", C_32F) & typed_forms<c64>(h, "c64", C_64F) & scal_by_real(h);
    ok &= narrow_forms(h, false) & narrow_forms(h, true);
    ok &= norms(h) & swaps_and_reductions(h) & rotations(h);
    ok &= matinv<float>(h, "S", cublasSmatinvBatched) & matinv<double>(h, "D", cublasDmatinvBatched);
    ok &= matinv<c64>(h, "Z", cublasZmatinvBatched);
    ok &= grouped<float, int>("SgemmGroupedBatched", false, [&](auto... a) { return cublasSgemmGroupedBatched(h, a...); });
    ok &= grouped<double, int>("DgemmGroupedBatched", false, [&](auto... a) { return cublasDgemmGroupedBatched(h, a...); });
    ok &= grouped<float, int64_t>("SgemmGroupedBatched_64", false,
                                  [&](auto... a) { return cublasSgemmGroupedBatched_64(h, a...); });
    ok &= grouped<float, int>("GemmGroupedBatchedEx f16 into f32", true,
                              [&](const int* ta, const int* tb, const int* m, const int* n, const int* k,
                                  const float* alpha, const void* const* a, const int* lda, const void* const* b,
                                  const int* ldb, const float* beta, void* const* c, const int* ldc, int groups,
                                  const int* sizes) {
                                  return cublasGemmGroupedBatchedEx(h, ta, tb, m, n, k, alpha, a, R_16F, lda, b,
                                                                    R_16F, ldb, beta, c, R_32F, ldc, groups, sizes,
                                                                    COMPUTE_32F);
                              });
    ok &= settings(h) & loggers(h, native);
    {
        // What cuBLAS refuses: matinvBatched of n 33, a group of -1 products.
        std::vector<float> v(8, 1);
        float* d = upload(v);
        int* info = upload(std::vector<int>(1, 0));
        status_line("matinvBatched of n 33", cublasSmatinvBatched(h, 33, (const void* const*)d, 33, (void* const*)d, 33, info, 1));
        int op[1] = {0}, two[1] = {2}, minus[1] = {-1};
        float one = 1;
        status_line("SgemmGroupedBatched of -1 products",
                    cublasSgemmGroupedBatched(h, op, op, two, two, two, &one, (const void* const*)d, two,
                                              (const void* const*)d, two, &one, (void* const*)d, two, 1, minus));
        if (!native) {
            // What the shim does not serve: an f32 axpy with an f64 alpha, binary16 swaps.
            double wide = 1;
            status_line("AxpyEx of f32 with an f64 alpha", cublasAxpyEx(h, 2, &wide, R_64F, d, R_32F, 1, d + 2, R_32F, 1, R_32F));
            status_line("SwapEx of f16", cublasSwapEx(h, 2, d, R_16F, 1, d + 2, R_16F, 1));
            // A null array of alphas, the first group empty (so the first alpha read is the
            // second group's, past the null pointer), which cuBLAS may read before it checks.
            int ops[2] = {0, 0}, twos[2] = {2, 2}, sizes[2] = {0, 1};
            float ones[2] = {1, 1};
            status_line("SgemmGroupedBatched with no alphas",
                        cublasSgemmGroupedBatched(h, ops, ops, twos, twos, twos, nullptr, (const void* const*)d, twos,
                                                  (const void* const*)d, twos, ones, (void* const*)d, twos, 2, sizes));
        }
        CHECK(cudaFree(d));
        CHECK(cudaFree(info));
    }
    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_level1_ex: all exact\n" : "cublas_level1_ex: FAILED\n");
    return ok ? 0 : 1;
}
