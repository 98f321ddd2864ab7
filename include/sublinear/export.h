/* Symbol visibility: the library builds with hidden visibility; what is public says so. */
#ifndef SUBLINEAR_EXPORT_H
#define SUBLINEAR_EXPORT_H
#if defined(_WIN32)
#define SUBLINEAR_API __declspec(dllexport)
#else
#define SUBLINEAR_API __attribute__((visibility("default")))
#endif
#endif
