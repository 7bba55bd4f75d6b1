// cuBLAS's batched LU, from a plain CUDA program linked against libcublas.so.13: getrfBatched,
// getrsBatched (operations N, T and C) and getriBatched in single, double and both complex
// precisions, the matrices side by side in one allocation (as CuPy lays out a stack) and apart;
// a singular matrix and a zero pivot without pivoting (null pivots) reported in info; and a
// parameter cuBLAS refuses. Each A is P^-1 L U for a unit lower L of quarters below 1 in
// magnitude (partial pivoting finds P again) and an upper U of small Gaussian integers whose
// diagonal's squared magnitudes are powers of two, so that every factor, pivot, solution and
// inverse is exact and compared element by element. Usage: cublas_lu
#include <complex>
#include <cstdio>
#include <string>
#include <vector>

#include "cublas_helpers.h"

extern "C" {
cublasStatus_t cublasSgetrfBatched(cublasHandle_t, int, void* const*, int, int*, int*, int);
cublasStatus_t cublasDgetrfBatched(cublasHandle_t, int, void* const*, int, int*, int*, int);
cublasStatus_t cublasCgetrfBatched(cublasHandle_t, int, void* const*, int, int*, int*, int);
cublasStatus_t cublasZgetrfBatched(cublasHandle_t, int, void* const*, int, int*, int*, int);
cublasStatus_t cublasSgetrsBatched(cublasHandle_t, cublasOperation_t, int, int, const void* const*, int, const int*,
                                   void* const*, int, int*, int);
cublasStatus_t cublasDgetrsBatched(cublasHandle_t, cublasOperation_t, int, int, const void* const*, int, const int*,
                                   void* const*, int, int*, int);
cublasStatus_t cublasCgetrsBatched(cublasHandle_t, cublasOperation_t, int, int, const void* const*, int, const int*,
                                   void* const*, int, int*, int);
cublasStatus_t cublasZgetrsBatched(cublasHandle_t, cublasOperation_t, int, int, const void* const*, int, const int*,
                                   void* const*, int, int*, int);
cublasStatus_t cublasSgetriBatched(cublasHandle_t, int, const void* const*, int, const int*, void* const*, int, int*,
                                   int);
cublasStatus_t cublasDgetriBatched(cublasHandle_t, int, const void* const*, int, const int*, void* const*, int, int*,
                                   int);
cublasStatus_t cublasCgetriBatched(cublasHandle_t, int, const void* const*, int, const int*, void* const*, int, int*,
                                   int);
cublasStatus_t cublasZgetriBatched(cublasHandle_t, int, const void* const*, int, const int*, void* const*, int, int*,
                                   int);
}

typedef std::complex<float> C;
typedef std::complex<double> Z;

// One precision's three routines.
template <typename E>
struct Lu {
    decltype(&cublasSgetrfBatched) getrf;
    decltype(&cublasSgetrsBatched) getrs;
    decltype(&cublasSgetriBatched) getri;
    const char* t;
};

template <typename E>
static constexpr bool is_complex() { return !std::is_floating_point<E>::value; }

template <typename E>
static E number(double re, double im) {
    if constexpr (is_complex<E>()) return E((typename E::value_type)re, (typename E::value_type)im);
    else return (E)re;
}

template <typename E>
static E conjugate(E v) {
    if constexpr (is_complex<E>()) return std::conj(v);
    else return v;
}

static const int N = 4, NRHS = 3, BATCH = 3;
static const int PIVOTS[BATCH][N] = {{3, 3, 4, 4}, {2, 4, 3, 4}, {4, 2, 3, 4}};

// Matrix `seed` of the batch: A (n x n, column-major, lda n) and its packed factors.
template <typename E>
struct Problem {
    std::vector<E> a, packed;

    explicit Problem(int seed) : a(N * N), packed(N * N) {
        const bool complex = is_complex<E>();
        auto quarter = [](int i, int s) { return ((i * 7 + s * 3) % 5) * 0.25 - 0.5; };
        auto l = [&](int i, int j) {
            if (i == j) return number<E>(1, 0);
            if (i < j) return number<E>(0, 0);
            return complex ? number<E>(quarter(i + 3 * j, seed) / 2, quarter(i + j, seed + 1) / 2)
                           : number<E>(quarter(i + 3 * j, seed), 0);
        };
        const double real_diagonal[4][2] = {{2, 0}, {-4, 0}, {1, 0}, {8, 0}};
        const double complex_diagonal[4][2] = {{2, 0}, {0, 2}, {1, 1}, {-2, 0}};
        auto u = [&](int i, int j) {
            if (i > j) return number<E>(0, 0);
            if (i == j) {
                const double* d = (complex ? complex_diagonal : real_diagonal)[(i + seed) % 4];
                return number<E>(d[0], d[1]);
            }
            return number<E>((i + 2 * j + seed) % 5 - 2, complex ? (i + j) % 3 - 1 : 0);
        };
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) {
                E sum = number<E>(0, 0);
                for (int p = 0; p < N; p++) sum += l(i, p) * u(p, j);
                a[i + j * N] = sum;
                packed[i + j * N] = i > j ? l(i, j) : u(i, j);
            }
        for (int j = N - 1; j >= 0; j--)
            for (int k = 0; k < N; k++) std::swap(a[j + k * N], a[PIVOTS[seed][j] - 1 + k * N]);
    }
};

template <typename E>
static bool is_nan(E v) { return std::isnan(std::real(v)) || std::isnan(std::imag(v)); }

template <typename E>
static bool same_as(const std::string& what, const std::vector<E>& got, const std::vector<E>& want) {
    for (size_t i = 0; i < want.size(); i++)
        if (!(got[i] == want[i]) && !(is_nan(got[i]) && is_nan(want[i]))) {
            printf("%s: element %zu is (%g, %g), expected (%g, %g)\n", what.c_str(), i, (double)std::real(got[i]),
                   (double)std::imag(got[i]), (double)std::real(want[i]), (double)std::imag(want[i]));
            return false;
        }
    printf("%s exact\n", what.c_str());
    return true;
}

// The device addresses of `count` matrices `stride` elements apart from `first`, in device memory.
template <typename E>
static void** addresses(E* first, int stride, int count) {
    std::vector<void*> v;
    for (int i = 0; i < count; i++) v.push_back(first + (size_t)i * stride);
    return upload(v);
}

// Factors, solves (N, T, C) and inverts a batch side by side in one allocation.
template <typename E>
static bool factors_solves_and_inverts(cublasHandle_t h, const Lu<E>& lu) {
    std::string t = lu.t;
    std::vector<E> as, packed, xs, bs[3];
    std::vector<Problem<E>> ps;
    for (int b = 0; b < BATCH; b++) ps.emplace_back(b);
    for (auto& p : ps) as.insert(as.end(), p.a.begin(), p.a.end());
    for (auto& p : ps) packed.insert(packed.end(), p.packed.begin(), p.packed.end());
    for (int e = 0; e < BATCH * N * NRHS; e++) xs.push_back(number<E>((e * 7) % 5 - 2, (e % 3) - 1));
    for (int op = 0; op < 3; op++)
        for (int b = 0; b < BATCH; b++)
            for (int j = 0; j < NRHS; j++)
                for (int i = 0; i < N; i++) {
                    E sum = number<E>(0, 0);
                    for (int p = 0; p < N; p++) {
                        E v = op == 0 ? ps[b].a[i + p * N] : ps[b].a[p + i * N];
                        sum += (op == 2 ? conjugate(v) : v) * xs[b * N * NRHS + p + j * N];
                    }
                    bs[op].push_back(sum);
                }
    E* da = upload(as);
    std::vector<int> minus(BATCH * N, -7);
    int* dp = upload(minus);
    int* dinfo = upload(std::vector<int>(BATCH, -7));
    void** a_array = addresses(da, N * N, BATCH);
    CUBLAS(lu.getrf(h, N, a_array, N, dp, dinfo, BATCH));
    bool ok = same_as(t + "getrfBatched factors", download(da, as.size()), packed);
    std::vector<int> want_pivots;
    for (int b = 0; b < BATCH; b++) want_pivots.insert(want_pivots.end(), PIVOTS[b], PIVOTS[b] + N);
    ok &= same_as(t + "getrfBatched pivots", download(dp, want_pivots.size()), want_pivots);
    ok &= same_as(t + "getrfBatched info", download(dinfo, BATCH), std::vector<int>(BATCH, 0));

    const char* names[3] = {"N", "T", "C"};
    for (int op = 0; op < 3; op++) {
        E* db = upload(bs[op]);
        void** b_array = addresses(db, N * NRHS, BATCH);
        int info = -7;
        CUBLAS(lu.getrs(h, (cublasOperation_t)op, N, NRHS, a_array, N, dp, b_array, N, &info, BATCH));
        ok &= same_as(t + "getrsBatched " + names[op], download(db, xs.size()), xs);
        ok &= info == 0;
        CHECK(cudaFree(db));
    }

    // The inverses: A C = I exactly.
    E* dc = upload(std::vector<E>(BATCH * N * N, number<E>(NAN, 0)));
    void** c_array = addresses(dc, N * N, BATCH);
    CHECK(cudaMemcpy(dinfo, minus.data(), BATCH * sizeof(int), cudaMemcpyHostToDevice));
    CUBLAS(lu.getri(h, N, a_array, N, dp, c_array, N, dinfo, BATCH));
    std::vector<E> c = download(dc, BATCH * N * N), identities, products;
    for (int b = 0; b < BATCH; b++)
        for (int j = 0; j < N; j++)
            for (int i = 0; i < N; i++) {
                E sum = number<E>(0, 0);
                for (int p = 0; p < N; p++) sum += ps[b].a[i + p * N] * c[b * N * N + p + j * N];
                products.push_back(sum);
                identities.push_back(number<E>(i == j, 0));
            }
    ok &= same_as(t + "getriBatched A C = I", products, identities);
    ok &= same_as(t + "getriBatched info", download(dinfo, BATCH), std::vector<int>(BATCH, 0));
    CHECK(cudaFree(da));
    CHECK(cudaFree(dc));
    return ok;
}

int main() {
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = true;
    ok &= factors_solves_and_inverts(h, Lu<float>{cublasSgetrfBatched, cublasSgetrsBatched, cublasSgetriBatched, "s"});
    ok &= factors_solves_and_inverts(h, Lu<double>{cublasDgetrfBatched, cublasDgetrsBatched, cublasDgetriBatched, "d"});
    ok &= factors_solves_and_inverts(h, Lu<C>{cublasCgetrfBatched, cublasCgetrsBatched, cublasCgetriBatched, "c"});
    ok &= factors_solves_and_inverts(h, Lu<Z>{cublasZgetrfBatched, cublasZgetrsBatched, cublasZgetriBatched, "z"});

    // Matrices apart (each its own allocation, listed last first): one launch a matrix.
    {
        std::vector<double*> apart;
        std::vector<double> packed;
        std::vector<int> want_pivots;
        for (int b = BATCH - 1; b >= 0; b--) {
            Problem<double> p(b);
            apart.push_back(upload(p.a));
            packed.insert(packed.end(), p.packed.begin(), p.packed.end());
            want_pivots.insert(want_pivots.end(), PIVOTS[b], PIVOTS[b] + N);
        }
        void** a_array = (void**)upload(apart);
        int* dp = upload(std::vector<int>(BATCH * N, 0));
        int* dinfo = upload(std::vector<int>(BATCH, -7));
        CUBLAS(cublasDgetrfBatched(h, N, a_array, N, dp, dinfo, BATCH));
        std::vector<double> got;
        for (double* a : apart) {
            std::vector<double> one = download(a, N * N);
            got.insert(got.end(), one.begin(), one.end());
        }
        ok &= same_as("dgetrfBatched apart", got, packed);
        ok &= same_as("dgetrfBatched apart pivots", download(dp, BATCH * N), want_pivots);
    }

    // A singular matrix (its last column zero): info 3. Without pivoting (null pivots), a zero
    // A(0, 0) is the first zero pivot: info 1.
    {
        std::vector<double> singular = {1, 3, 5, 2, 4, 7, 0, 0, 0}, zero_first = {0, 1, 1, 1};
        double* ds = upload(singular);
        double* dz = upload(zero_first);
        void** s_array = (void**)upload(std::vector<double*>{ds});
        void** z_array = (void**)upload(std::vector<double*>{dz});
        int* dp = upload(std::vector<int>(3, 0));
        int* dinfo = upload(std::vector<int>(1, -7));
        CUBLAS(cublasDgetrfBatched(h, 3, s_array, 3, dp, dinfo, 1));
        printf("singular info %d\n", download(dinfo, 1)[0]);
        ok &= download(dinfo, 1)[0] == 3;
        CUBLAS(cublasDgetrfBatched(h, 2, z_array, 2, nullptr, dinfo, 1));
        printf("no pivoting info %d\n", download(dinfo, 1)[0]);
        ok &= download(dinfo, 1)[0] == 1;
    }

    // What cuBLAS refuses: an operation of 3 (the first parameter after the handle).
    int info = 0;
    cublasStatus_t s = cublasDgetrsBatched(h, (cublasOperation_t)3, 2, 1, nullptr, 2, nullptr, nullptr, 2, &info, 1);
    printf("getrs operation 3: %d %s, info %d\n", (int)s, cublasGetStatusName(s), info);
    ok &= s == CUBLAS_STATUS_INVALID_VALUE && info == -1;

    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_lu: all exact\n" : "cublas_lu: FAILED\n");
    return ok ? 0 : 1;
}
