// cuBLAS's batched QR from a plain CUDA program linked against libcublas.so.13: geqrfBatched
// (tall matrices side by side in one allocation, as CuPy and PyTorch stack them, and wide ones
// apart) and gelsBatched (overdetermined least squares, C padded) in single, double and both
// complex precisions. Householder results are not small integers, so each is checked against
// what it must satisfy, in double on the host, within a tolerance of its precision: Q R = A with
// Q built from the reflectors and taus, Q^H Q = I, R upper with a real diagonal; gelsBatched's X
// solving the normal equations A^H (A X - C) = 0, C's rows from n on holding the residual's norm,
// the padding untouched (exactly), info 0. Then a rank-deficient A (info 2), a null devInfoArray,
// and what cuBLAS refuses or does not support.
// Usage: cublas_qr [--native] (--native: leaves out the refusals' host info values, which
// cuBLAS's documentation does not spell out, so that a native run does not depend on them)
#include <complex>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cublas_helpers.h"
#include "cublas_typed.h"

// Matrices as untyped pointers: the same symbols, whatever the element type.
extern "C" {
#define GEQRF(name) cublasStatus_t name(cublasHandle_t, int, int, void* const*, int, void* const*, int*, int);
#define GELS(name)                                                                                                 \
    cublasStatus_t name(cublasHandle_t, cublasOperation_t, int, int, int, void* const*, int, void* const*, int,    \
                        int*, int*, int);
GEQRF(cublasSgeqrfBatched)
GEQRF(cublasDgeqrfBatched)
GEQRF(cublasCgeqrfBatched)
GEQRF(cublasZgeqrfBatched)
GELS(cublasSgelsBatched)
GELS(cublasDgelsBatched)
GELS(cublasCgelsBatched)
GELS(cublasZgelsBatched)
}

// The functions of one element type and its tolerance (relative to the data's magnitude).
template <typename E>
struct Qr;
#define QR_OF(E, P, geqrf, gels, tolerance)                   \
    template <>                                               \
    struct Qr<E> {                                            \
        static constexpr const char* name = P;                \
        static constexpr auto geqrf_ = geqrf;                 \
        static constexpr auto gels_ = gels;                   \
        static constexpr double tol = tolerance;              \
    };
QR_OF(float, "s", cublasSgeqrfBatched, cublasSgelsBatched, 1e-4)
QR_OF(double, "d", cublasDgeqrfBatched, cublasDgelsBatched, 1e-10)
QR_OF(c32, "c", cublasCgeqrfBatched, cublasCgelsBatched, 1e-4)
QR_OF(c64, "z", cublasZgeqrfBatched, cublasZgelsBatched, 1e-10)

typedef std::complex<double> Zd;

template <typename E>
static Zd wide(E v) {
    return Zd((double)std::real(v), (double)std::imag(v));
}

// Elements of a column-major matrix with leading dimension ld, as complex doubles.
struct Matrix {
    int rows, cols;
    std::vector<Zd> v;
    Matrix(int rows, int cols) : rows(rows), cols(cols), v((size_t)rows * cols) {}
    Zd& at(int i, int j) { return v[i + (size_t)j * rows]; }
    Zd at(int i, int j) const { return v[i + (size_t)j * rows]; }
};

template <typename E>
static Matrix read(const E* data, int rows, int cols, int ld) {
    Matrix out(rows, cols);
    for (int j = 0; j < cols; j++)
        for (int i = 0; i < rows; i++) out.at(i, j) = wide(data[i + j * ld]);
    return out;
}

// Whether every |got - want| is within tol * max(1, the largest |want|); says `what` either way.
static bool close(const std::string& what, const std::vector<Zd>& got, const std::vector<Zd>& want, double tol) {
    double scale = 1, worst = 0;
    for (Zd w : want) scale = std::max(scale, std::abs(w));
    for (size_t e = 0; e < want.size(); e++) worst = std::max(worst, std::abs(got[e] - want[e]));
    bool ok = worst <= tol * scale;
    printf("%s %s (largest difference %.3g of %.3g)\n", what.c_str(), ok ? "within tolerance" : "FAILED", worst,
           scale);
    return ok;
}

// Q (m x m) of a factored m x n A: H_0 H_1 ... H_(k-1), H_j = I - tau_j v_j v_j^H, v_j's x below
// A's diagonal.
static Matrix q_of(const Matrix& a, const std::vector<Zd>& tau) {
    const int m = a.rows, k = (int)tau.size();
    Matrix q(m, m);
    for (int i = 0; i < m; i++) q.at(i, i) = 1;
    for (int j = k - 1; j >= 0; j--)
        for (int c = 0; c < m; c++) {
            Zd w = 0;
            for (int i = j; i < m; i++) w += std::conj(i == j ? Zd(1) : a.at(i, j)) * q.at(i, c);
            for (int i = j; i < m; i++) q.at(i, c) -= tau[j] * (i == j ? Zd(1) : a.at(i, j)) * w;
        }
    return q;
}

// Checks one factored A against the original: Q R = A, Q^H Q = I, R's diagonal real.
template <typename E>
static bool factored(const std::string& what, const Matrix& original, const Matrix& f, const std::vector<Zd>& tau) {
    const int m = f.rows, n = f.cols;
    Matrix q = q_of(f, tau);
    std::vector<Zd> qr, a, qhq, identity;
    bool real_diagonal = true;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            Zd sum = 0;
            for (int p = 0; p <= std::min(j, m - 1); p++) sum += q.at(i, p) * f.at(p, j);
            qr.push_back(sum);
            a.push_back(original.at(i, j));
            if (i == j) real_diagonal &= f.at(i, j).imag() == 0;
        }
    for (int j = 0; j < m; j++)
        for (int i = 0; i < m; i++) {
            Zd sum = 0;
            for (int p = 0; p < m; p++) sum += std::conj(q.at(p, i)) * q.at(p, j);
            qhq.push_back(sum);
            identity.push_back(i == j ? 1 : 0);
        }
    bool ok = close(what + " Q R = A", qr, a, Qr<E>::tol);
    ok &= close(what + " Q^H Q = I", qhq, identity, Qr<E>::tol);
    if (!real_diagonal) printf("%s: R's diagonal is not real\n", what.c_str());
    return ok && real_diagonal;
}

// n values of small integers and halves in both parts (real types: the real part).
template <typename E>
static std::vector<E> data(size_t n, int seed) {
    std::vector<E> v(n);
    typedef decltype(std::real(make<E>(0, 0))) Real;
    for (size_t i = 0; i < n; i++)
        v[i] = make<E>((int)((i * 7 + seed) % 11) - 5, (int)((i * 3 + seed) % 7) - 3) * (Real)0.5;
    return v;
}

// The device addresses of `count` matrices `stride` elements apart from `first`.
template <typename E>
static void** addresses(E* first, size_t stride, int count) {
    std::vector<E*> out;
    for (int b = 0; b < count; b++) out.push_back(first + stride * b);
    return (void**)upload(out);
}

// Tall 5 x 3 matrices (lda 6), three side by side, taus side by side: one strided launch.
template <typename E>
static bool tall(cublasHandle_t h) {
    const int m = 5, n = 3, lda = 6, batch = 3;
    const std::string t = Qr<E>::name;
    std::vector<E> a = data<E>((size_t)lda * n * batch, 1);
    E* da = upload(a);
    E* dtau = upload(std::vector<E>((size_t)n * batch, make<E>(7, 7)));
    int info = -7;
    CUBLAS(Qr<E>::geqrf_(h, m, n, addresses(da, (size_t)lda * n, batch), lda, addresses(dtau, n, batch), &info, batch));
    std::vector<E> got = download(da, a.size()), taus = download(dtau, (size_t)n * batch);
    bool ok = info == 0;
    for (int b = 0; b < batch; b++) {
        std::vector<Zd> tau;
        for (int j = 0; j < n; j++) tau.push_back(wide(taus[b * n + j]));
        const size_t at = (size_t)b * lda * n;
        ok &= factored<E>(t + "geqrfBatched tall " + std::to_string(b), read(&a[at], m, n, lda),
                          read(&got[at], m, n, lda), tau);
        for (int j = 0; j < n; j++) ok &= got[at + m + j * lda] == a[at + m + j * lda];  // the padding row
    }
    return ok;
}

// Wide 3 x 5 matrices, each its own allocation (listed last first): a launch a matrix.
template <typename E>
static bool wide_apart(cublasHandle_t h) {
    const int m = 3, n = 5, batch = 2;
    const std::string t = Qr<E>::name;
    std::vector<std::vector<E>> as;
    std::vector<E*> das, dtaus;
    for (int b = batch - 1; b >= 0; b--) {
        as.push_back(data<E>((size_t)m * n, 5 + b));
        das.push_back(upload(as.back()));
        dtaus.push_back(upload(std::vector<E>(m, make<E>(7, 7))));
    }
    int info = -7;
    CUBLAS(Qr<E>::geqrf_(h, m, n, (void**)upload(das), m, (void**)upload(dtaus), &info, batch));
    bool ok = info == 0;
    for (int b = 0; b < batch; b++) {
        std::vector<E> got = download(das[b], (size_t)m * n), taus = download(dtaus[b], m);
        std::vector<Zd> tau;
        for (E v : taus) tau.push_back(wide(v));
        ok &= factored<E>(t + "geqrfBatched wide " + std::to_string(b), read(as[b].data(), m, n, m),
                          read(got.data(), m, n, m), tau);
    }
    return ok;
}

// Least squares: 6 x 3 As, two right-hand sides in a C padded to ldc 7; devInfoArray given, or
// null (`with_info` false).
template <typename E>
static bool least_squares(cublasHandle_t h, bool with_info) {
    const int m = 6, n = 3, nrhs = 2, ldc = 7, batch = 2;
    const std::string t = std::string(Qr<E>::name) + "gelsBatched" + (with_info ? "" : " no devInfo");
    std::vector<E> a = data<E>((size_t)m * n * batch, 2), c = data<E>((size_t)ldc * nrhs * batch, 9);
    E* da = upload(a);
    E* dc = upload(c);
    int* dinfo = with_info ? upload(std::vector<int>(batch, -7)) : nullptr;
    int info = -7;
    CUBLAS(Qr<E>::gels_(h, CUBLAS_OP_N, m, n, nrhs, addresses(da, (size_t)m * n, batch), m,
                        addresses(dc, (size_t)ldc * nrhs, batch), ldc, &info, dinfo, batch));
    std::vector<E> x = download(dc, c.size());
    bool ok = info == 0;
    if (with_info) {
        std::vector<int> infos = download(dinfo, batch);
        ok &= infos[0] == 0 && infos[1] == 0;
        printf("%s info %d %d\n", t.c_str(), infos[0], infos[1]);
    }
    std::vector<Zd> normal, zeros, residual, rest;
    for (int b = 0; b < batch; b++) {
        Matrix A = read(&a[(size_t)b * m * n], m, n, m);
        for (int v = 0; v < nrhs; v++) {
            const E* c0 = &c[(size_t)b * ldc * nrhs + (size_t)v * ldc];
            const E* xv = &x[(size_t)b * ldc * nrhs + (size_t)v * ldc];
            // r = A x - c; A^H r = 0; |r|^2 = the sum of |C_i|^2 over rows i >= n.
            std::vector<Zd> r(m);
            double rr = 0, tail = 0;
            for (int i = 0; i < m; i++) {
                r[i] = -wide(c0[i]);
                for (int p = 0; p < n; p++) r[i] += A.at(i, p) * wide(xv[p]);
                rr += std::norm(r[i]);
            }
            for (int i = n; i < m; i++) tail += std::norm(wide(xv[i]));
            for (int p = 0; p < n; p++) {
                Zd s = 0;
                for (int i = 0; i < m; i++) s += std::conj(A.at(i, p)) * r[i];
                normal.push_back(s);
                zeros.push_back(0);
            }
            residual.push_back(tail);
            rest.push_back(rr);
            ok &= xv[m] == c0[m];  // the padding row
        }
    }
    ok &= close(t + " normal equations", normal, zeros, Qr<E>::tol * 10);
    ok &= close(t + " residual", residual, rest, Qr<E>::tol * 10);
    return ok;
}

int main(int argc, char** argv) {
    const bool native = argc > 1 && std::strcmp(argv[1], "--native") == 0;
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = true;
    ok &= tall<float>(h) && tall<double>(h) && tall<c32>(h) && tall<c64>(h);
    ok &= wide_apart<float>(h) && wide_apart<double>(h) && wide_apart<c32>(h) && wide_apart<c64>(h);
    ok &= least_squares<float>(h, true) && least_squares<double>(h, true);
    ok &= least_squares<c32>(h, true) && least_squares<c64>(h, true);
    ok &= least_squares<double>(h, false);

    // Column 1 twice column 0, whose reflection is exact: R(1, 1) is zero, A is rank-deficient.
    {
        double* da = upload(std::vector<double>{3, 4, 0, 6, 8, 0});
        double* dc = upload(std::vector<double>{1, 2, 3});
        int* dinfo = upload(std::vector<int>{-7});
        int info = -7;
        CUBLAS(cublasDgelsBatched(h, CUBLAS_OP_N, 3, 2, 1, addresses(da, 6, 1), 3, addresses(dc, 3, 1), 3, &info,
                                  dinfo, 1));
        const int rank = download(dinfo, 1)[0];
        printf("dgelsBatched rank-deficient info %d\n", rank);
        ok &= info == 0 && rank == 2;
    }

    // What cuBLAS does not support (op T, fewer rows than columns) or refuses (lda below m).
    struct Refusal {
        const char* what;
        cublasStatus_t status;
        int info;
    };
    int info = 0;
    const Refusal refusals[] = {
        {"gels trans T", cublasDgelsBatched(h, CUBLAS_OP_T, 4, 2, 1, nullptr, 4, nullptr, 4, &info, nullptr, 1), info},
        {"gels m < n", cublasDgelsBatched(h, CUBLAS_OP_N, 2, 4, 1, nullptr, 2, nullptr, 2, &info, nullptr, 1), info},
        {"geqrf lda below m", cublasDgeqrfBatched(h, 4, 2, nullptr, 3, nullptr, &info, 1), info},
    };
    const cublasStatus_t wanted[] = {CUBLAS_STATUS_NOT_SUPPORTED, CUBLAS_STATUS_NOT_SUPPORTED,
                                     CUBLAS_STATUS_INVALID_VALUE};
    const int infos[] = {-1, -3, -4};
    for (int i = 0; i < 3; i++) {
        const Refusal& r = refusals[i];
        if (native) {
            printf("%s: %d %s\n", r.what, (int)r.status, cublasGetStatusName(r.status));
            ok &= r.status != CUBLAS_STATUS_SUCCESS;
        } else {
            printf("%s: %d %s, info %d\n", r.what, (int)r.status, cublasGetStatusName(r.status), r.info);
            ok &= r.status == wanted[i] && r.info == infos[i];
        }
    }

    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_qr: all within tolerance\n" : "cublas_qr: FAILED\n");
    return ok ? 0 : 1;
}
