// Binary16 and bfloat16 values on the host, for the test programs (CI cannot include
// cuda_fp16.h): each one's bits from a float and its value back.
#pragma once
#include <cstring>

// The binary16 bits of a float that binary16 holds exactly (zero, or a normal value of 11
// significant bits: the small integers here), and a binary16's value.
static unsigned short half_of(float v) {
    unsigned x;
    memcpy(&x, &v, 4);
    unsigned sign = (x >> 16) & 0x8000u;
    if ((x & 0x7fffffffu) == 0) return (unsigned short)sign;
    unsigned exponent = ((x >> 23) & 0xffu) - 127 + 15;
    return (unsigned short)(sign | exponent << 10 | ((x >> 13) & 0x3ffu));
}

static float float_of_half(unsigned short h) {
    unsigned sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    unsigned x = exponent == 0 ? sign : sign | (exponent - 15 + 127) << 23 | mantissa << 13;
    float v;
    memcpy(&v, &x, 4);
    return v;
}

// A float rounded to bfloat16 (to nearest, ties to even), as bits; and a bfloat16's value.
static unsigned short bfloat16_of(float v) {
    unsigned x;
    memcpy(&x, &v, 4);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (unsigned short)(x >> 16);
}

static float float_of_bfloat16(unsigned short b) {
    unsigned x = (unsigned)b << 16;
    float v;
    memcpy(&v, &x, 4);
    return v;
}
