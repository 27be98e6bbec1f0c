/* Pieces of the CUPTI tracer (libmpress-inject.so) that tests drive directly: decoding CUPTI
 * activity buffers into mpress-events lines, and the NVTX range callback. They write whole
 * lines into one locked buffer that goes to the file descriptor set with inject_set_output, so
 * lines from different threads never interleave. Not stdio: a child forked by the program
 * (data-loader workers) must not write the parent's buffered lines a second time at its exit. */
#ifndef MPRESS_INJECT_INTERNAL_H
#define MPRESS_INJECT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cupti.h>

/* The record layouts this tracer was written against (CUDA 13.0, CUPTI_API_VERSION 130001).
 * tests/profile/test_inject.c pins their sizes; a CUDA release that changes them must be
 * caught there, not by garbage in traces. */
typedef CUpti_ActivityKernel10 inject_kernel_t;
typedef CUpti_ActivityMemcpy6 inject_memcpy_t;
typedef CUpti_ActivityMemcpyPtoP4 inject_memcpy2_t;
typedef CUpti_ActivityMemset4 inject_memset_t;
typedef CUpti_ActivityMemory4 inject_memory2_t;
typedef CUpti_ActivityMemoryPool3 inject_pool_t;
typedef CUpti_ActivityAPI inject_api_t;
typedef CUpti_ActivityMarker2 inject_marker_t;
typedef CUpti_ActivityOverhead3 inject_overhead_t;
typedef CUpti_ActivityExternalCorrelation inject_extcorr_t;
typedef CUpti_ActivityDevice5 inject_device_t;

/* The external-correlation kind the tracer pushes range ids under. */
#define INJECT_EXT_KIND CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0

/* fd < 0 stops output. The fd is not closed here. */
void inject_set_output(int fd);
/* Writes out what is buffered. */
void inject_flush(void);
/* Appends a line as is (it must end with a newline). */
void inject_raw(const char *line);

/* Writes one event line (fmt is the inside of the JSON object, without braces). */
void inject_event(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* Writes s as a JSON string (with quotes) into out[cap], truncated to fit; returns out. */
char *inject_json_string(char *out, size_t cap, const char *s);

/* Walks a completed activity buffer with cuptiActivityGetNextRecord and writes one event per
 * record it knows. Returns the number of records; *unknown counts kinds it skipped. */
uint64_t inject_decode_buffer(uint8_t *buf, size_t valid, uint64_t *unknown);

/* CUPTI's buffer-completion callback: decodes the buffer, notes dropped records, frees the
 * buffer (it came from aligned_alloc) and writes the lines out. */
void CUPTIAPI inject_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                      size_t size, size_t valid);

/* The driver's entry point (inject.c). */
int InitializeInjection(void);

/* NVTX's entry point (inject.c): forwards to the libcupti this library is linked with. */
int InitializeInjectionNvtx2(void *get_export_table);

/* The function called name in the libcupti this code is linked with, or NULL. */
int (*inject_cupti_nvtx_entry(const char *name))(void *);

/* The thread that hands CUPTI's completed buffers over every 500 ms (inject.c). Stop joins it;
 * in a child forked after start there is no such thread and stop returns at once. */
void inject_flusher_start(void);
void inject_flusher_stop(void);
int inject_flusher_running(void);

/* SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT: a last forced flush (bounded by a 5 s alarm),
 * then the signal's previous action (inject.c). */
void inject_install_signal_handlers(void);

/* Whether a CUPTI reporting version runtime can feed a tracer built against headers of
 * version built (same major release, same or newer minor release). */
int inject_version_ok(uint32_t runtime, uint32_t built);

/* CUPTI callback for the NVTX domain: range push/pop (and domain variants) write push/pop
 * events and push/pop an external correlation id equal to the range id, so that every CUDA
 * call inside the range is attributed to it. Registered strings are remembered. */
void CUPTIAPI inject_nvtx_callback(void *userdata, CUpti_CallbackDomain domain,
                                   CUpti_CallbackId cbid, const void *cbdata);

/* Nanoseconds on CUPTI's clock (the clock of activity records). */
uint64_t inject_now(void);

#endif
