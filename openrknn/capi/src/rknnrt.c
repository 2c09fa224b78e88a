/*
 * rknnrt.c -- openrknn's librknnrt: the documented RKNN Runtime C API over openrknn.runtime.
 *
 * Each entry point forwards its arguments (integers, and the addresses of the caller's structures
 * and buffers) to openrknn/capi/bridge.py, which reads and writes those structures in place and
 * runs the model through RKNNLite. The interpreter is started on first use (or the running one is
 * joined when a Python program loaded this library); every call holds the GIL only while inside.
 * Zero-copy memory is allocated here, so rknn_tensor_mem.virt_addr is ordinary process memory the
 * runtime reads and writes directly.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "rknn_api.h"
#include "rknn_custom_op.h"
#include "rknn_matmul_api.h"

#ifndef OPENRKNN_PYTHON
#define OPENRKNN_PYTHON ""      /* the Python the library was built with (its venv), set by the build */
#endif
#ifndef OPENRKNN_PACKAGE_ROOT
#define OPENRKNN_PACKAGE_ROOT ""  /* folder holding the openrknn package, set by the build */
#endif
#ifndef OPENRKNN_LIBPYTHON
#define OPENRKNN_LIBPYTHON ""
#endif

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static PyObject* g_bridge = NULL;
static int g_ready = 0;

static void report_python_error(const char* what) {
    fprintf(stderr, "E %s: the openrknn runtime failed in Python:\n", what);
    PyErr_Print();
}

static void start_python(void) {
    int started_here = 0;
    if (!Py_IsInitialized()) {
        /* numpy's and onnxruntime's extension modules need libpython's symbols in the global scope */
        if (OPENRKNN_LIBPYTHON[0]) dlopen(OPENRKNN_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
        PyConfig config;
        PyConfig_InitPythonConfig(&config);
        config.install_signal_handlers = 0;
        config.parse_argv = 0;
        const char* python = getenv("OPENRKNN_CAPI_PYTHON");
        if (python == NULL || python[0] == 0) python = OPENRKNN_PYTHON;
        PyStatus status = PyStatus_Ok();
        if (python[0]) status = PyConfig_SetBytesString(&config, &config.program_name, python);
        char* argv[] = {"librknnrt"};
        if (!PyStatus_Exception(status)) status = PyConfig_SetBytesArgv(&config, 1, argv);
        if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
        PyConfig_Clear(&config);
        if (PyStatus_Exception(status)) {
            fprintf(stderr, "E librknnrt: cannot start Python (%s): %s\n", python,
                    status.err_msg ? status.err_msg : "unknown error");
            return;
        }
        started_here = 1;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    if (OPENRKNN_PACKAGE_ROOT[0]) {
        /* the build's package folder goes last: PYTHONPATH and the venv come first */
        PyObject* path = PySys_GetObject("path");
        PyObject* root = PyUnicode_DecodeFSDefault(OPENRKNN_PACKAGE_ROOT);
        if (path && root && !PySequence_Contains(path, root)) PyList_Append(path, root);
        Py_XDECREF(root);
    }
    g_bridge = PyImport_ImportModule("openrknn.capi.bridge");
    if (g_bridge == NULL) {
        report_python_error("librknnrt");
        fprintf(stderr, "E librknnrt: install openrknn in the Python the library was built with (%s), or set "
                        "OPENRKNN_CAPI_PYTHON to a python with openrknn installed\n", OPENRKNN_PYTHON);
    } else {
        if (started_here) {
            PyObject* r = PyObject_CallMethod(g_bridge, "embedded_setup", NULL);
            if (r == NULL) report_python_error("librknnrt");
            Py_XDECREF(r);
        }
        g_ready = 1;
    }
    PyGILState_Release(gil);
    if (started_here) PyEval_SaveThread();   /* let the calls (and the inference threads) take the GIL */
}

/* Call bridge.<name>(*args) built from fmt; the integer it returns (fallback on failure). */
static long long call_bridge(const char* name, long long fallback, const char* fmt, ...) {
    pthread_once(&g_once, start_python);
    if (!g_ready) return fallback;
    PyGILState_STATE gil = PyGILState_Ensure();
    va_list ap;
    va_start(ap, fmt);
    PyObject* args = Py_VaBuildValue(fmt, ap);
    va_end(ap);
    long long result = fallback;
    PyObject* function = PyObject_GetAttrString(g_bridge, name);
    PyObject* value = (function && args) ? PyObject_CallObject(function, args) : NULL;
    if (value == NULL) {
        report_python_error(name);
    } else {
        result = PyLong_AsLongLong(value);
        if (result == -1 && PyErr_Occurred()) {
            report_python_error(name);
            result = fallback;
        }
    }
    Py_XDECREF(value);
    Py_XDECREF(function);
    Py_XDECREF(args);
    PyGILState_Release(gil);
    return result;
}

#define PTR(p) ((unsigned long long)(uintptr_t)(p))
#define CTX(c) ((unsigned long long)(c))

/* ---- general API ---- */
int rknn_init(rknn_context* context, void* model, uint32_t size, uint32_t flag, rknn_init_extend* extend) {
    return (int)call_bridge("init", RKNN_ERR_FAIL, "(KKIIK)", PTR(context), PTR(model), size, flag, PTR(extend));
}

int rknn_dup_context(rknn_context* context_in, rknn_context* context_out) {
    return (int)call_bridge("dup_context", RKNN_ERR_FAIL, "(KK)", PTR(context_in), PTR(context_out));
}

int rknn_destroy(rknn_context context) {
    return (int)call_bridge("destroy", RKNN_ERR_FAIL, "(K)", CTX(context));
}

int rknn_query(rknn_context context, rknn_query_cmd cmd, void* info, uint32_t size) {
    return (int)call_bridge("query", RKNN_ERR_FAIL, "(KiKI)", CTX(context), (int)cmd, PTR(info), size);
}

int rknn_inputs_set(rknn_context context, uint32_t n_inputs, rknn_input inputs[]) {
    return (int)call_bridge("inputs_set", RKNN_ERR_FAIL, "(KIK)", CTX(context), n_inputs, PTR(inputs));
}

int rknn_set_batch_core_num(rknn_context context, int core_num) {
    return (int)call_bridge("set_batch_core_num", RKNN_ERR_FAIL, "(Ki)", CTX(context), core_num);
}

int rknn_set_core_mask(rknn_context context, rknn_core_mask core_mask) {
    return (int)call_bridge("set_core_mask", RKNN_ERR_FAIL, "(Ki)", CTX(context), (int)core_mask);
}

int rknn_run(rknn_context context, rknn_run_extend* extend) {
    return (int)call_bridge("run", RKNN_ERR_FAIL, "(KK)", CTX(context), PTR(extend));
}

int rknn_wait(rknn_context context, rknn_run_extend* extend) {
    return (int)call_bridge("wait", RKNN_ERR_FAIL, "(KK)", CTX(context), PTR(extend));
}

int rknn_outputs_get(rknn_context context, uint32_t n_outputs, rknn_output outputs[], rknn_output_extend* extend) {
    return (int)call_bridge("outputs_get", RKNN_ERR_FAIL, "(KIKK)", CTX(context), n_outputs, PTR(outputs),
                            PTR(extend));
}

int rknn_outputs_release(rknn_context context, uint32_t n_outputs, rknn_output outputs[]) {
    return (int)call_bridge("outputs_release", RKNN_ERR_FAIL, "(KIK)", CTX(context), n_outputs, PTR(outputs));
}

int rknn_set_input_shapes(rknn_context ctx, uint32_t n_inputs, rknn_tensor_attr attr[]) {
    return (int)call_bridge("set_input_shapes", RKNN_ERR_FAIL, "(KIK)", CTX(ctx), n_inputs, PTR(attr));
}

/* ---- zero-copy memory ---- */
typedef struct {
    rknn_tensor_mem mem;     /* first: the caller's pointer is this struct's address */
    void* allocation;        /* freed by rknn_destroy_mem (rknn_create_mem) */
    void* mapping;           /* munmap'ed by rknn_destroy_mem (rknn_create_mem_from_fd without virt) */
    size_t mapping_size;
} owned_mem;

static void free_mem(owned_mem* m) {
    if (m->allocation) free(m->allocation);
    if (m->mapping) munmap(m->mapping, m->mapping_size);
    free(m);
}

static rknn_tensor_mem* register_mem(rknn_context ctx, owned_mem* m) {
    long long ok = call_bridge("register_mem", 0, "(KK)", CTX(ctx), PTR(&m->mem));
    if (!ok) {
        free_mem(m);
        return NULL;
    }
    return &m->mem;
}

rknn_tensor_mem* rknn_create_mem2(rknn_context ctx, uint64_t size, uint64_t alloc_flags) {
    if (size == 0 || size > 0xFFFFFFFFull) {
        fprintf(stderr, "E rknn_create_mem: size %llu is not valid (1 .. 4 GiB - 1)\n", (unsigned long long)size);
        return NULL;
    }
    owned_mem* m = (owned_mem*)calloc(1, sizeof(owned_mem));
    if (m == NULL || posix_memalign(&m->allocation, 64, (size_t)((size + 63) & ~63ull)) != 0) {
        fprintf(stderr, "E rknn_create_mem: out of memory for %llu bytes\n", (unsigned long long)size);
        free(m);
        return NULL;
    }
    memset(m->allocation, 0, (size_t)((size + 63) & ~63ull));
    if (alloc_flags & RKNN_FLAG_MEMORY_TRY_ALLOC_SRAM)
        fprintf(stderr, "W rknn_create_mem2: this runtime has no NPU SRAM; the memory is in DDR\n");
    m->mem.virt_addr = m->allocation;
    m->mem.phys_addr = (uint64_t)(uintptr_t)m->allocation;   /* no IOMMU: the CPU address is the device address */
    m->mem.fd = -1;
    m->mem.size = (uint32_t)size;
    m->mem.flags = RKNN_TENSOR_MEMORY_FLAGS_ALLOC_INSIDE;
    return register_mem(ctx, m);
}

rknn_tensor_mem* rknn_create_mem(rknn_context ctx, uint32_t size) {
    return rknn_create_mem2(ctx, size, RKNN_FLAG_MEMORY_FLAGS_DEFAULT);
}

rknn_tensor_mem* rknn_create_mem_from_fd(rknn_context ctx, int32_t fd, void* virt_addr, uint32_t size,
                                         int32_t offset) {
    if (fd < 0 || size == 0 || offset < 0) {
        fprintf(stderr, "E rknn_create_mem_from_fd: fd %d / size %u / offset %d is not valid\n", fd, size, offset);
        return NULL;
    }
    owned_mem* m = (owned_mem*)calloc(1, sizeof(owned_mem));
    if (m == NULL) return NULL;
    if (virt_addr == NULL) {   /* map the buffer (dma-buf, memfd, file) so the CPU runtime can use it */
        m->mapping_size = (size_t)size + (size_t)offset;
        void* mapped = mmap(NULL, m->mapping_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mapped == MAP_FAILED) {
            fprintf(stderr, "E rknn_create_mem_from_fd: cannot map fd %d (%u bytes + offset %d): %s\n", fd, size,
                    offset, strerror(errno));
            free(m);
            return NULL;
        }
        m->mapping = mapped;
        virt_addr = mapped;
    }
    m->mem.virt_addr = virt_addr;
    m->mem.phys_addr = 0;
    m->mem.fd = fd;
    m->mem.offset = offset;
    m->mem.size = size + (uint32_t)offset;
    m->mem.flags = RKNN_TENSOR_MEMORY_FLAGS_FROM_FD;
    return register_mem(ctx, m);
}

rknn_tensor_mem* rknn_create_mem_from_phys(rknn_context ctx, uint64_t phys_addr, void* virt_addr, uint32_t size) {
    if (virt_addr == NULL || size == 0) {
        fprintf(stderr, "E rknn_create_mem_from_phys: this CPU runtime reaches memory through its virtual address; "
                        "pass virt_addr (and size > 0) with the physical address\n");
        return NULL;
    }
    owned_mem* m = (owned_mem*)calloc(1, sizeof(owned_mem));
    if (m == NULL) return NULL;
    m->mem.virt_addr = virt_addr;
    m->mem.phys_addr = phys_addr;
    m->mem.fd = -1;
    m->mem.size = size;
    m->mem.flags = RKNN_TENSOR_MEMORY_FLAGS_FROM_PHYS;
    return register_mem(ctx, m);
}

int rknn_destroy_mem(rknn_context ctx, rknn_tensor_mem* mem) {
    if (mem == NULL) {
        fprintf(stderr, "E rknn_destroy_mem: mem is NULL\n");
        return RKNN_ERR_PARAM_INVALID;
    }
    int ret = (int)call_bridge("unregister_mem", RKNN_ERR_FAIL, "(KK)", CTX(ctx), PTR(mem));
    if (ret == RKNN_SUCC) free_mem((owned_mem*)mem);
    return ret;
}

int rknn_set_weight_mem(rknn_context ctx, rknn_tensor_mem* mem) {
    return (int)call_bridge("set_weight_mem", RKNN_ERR_FAIL, "(KK)", CTX(ctx), PTR(mem));
}

int rknn_set_internal_mem(rknn_context ctx, rknn_tensor_mem* mem) {
    return (int)call_bridge("set_internal_mem", RKNN_ERR_FAIL, "(KK)", CTX(ctx), PTR(mem));
}

int rknn_set_io_mem(rknn_context ctx, rknn_tensor_mem* mem, rknn_tensor_attr* attr) {
    return (int)call_bridge("set_io_mem", RKNN_ERR_FAIL, "(KKK)", CTX(ctx), PTR(mem), PTR(attr));
}

int rknn_mem_sync(rknn_context context, rknn_tensor_mem* mem, rknn_mem_sync_mode mode) {
    return (int)call_bridge("mem_sync", RKNN_ERR_FAIL, "(KKi)", CTX(context), PTR(mem), (int)mode);
}

/* ---- custom operators ---- */
int rknn_register_custom_ops(rknn_context ctx, rknn_custom_op* op, uint32_t custom_op_num) {
    return (int)call_bridge("register_custom_ops", RKNN_ERR_FAIL, "(KKI)", CTX(ctx), PTR(op), custom_op_num);
}

void rknn_custom_op_get_op_attr(rknn_custom_op_context* op_ctx, const char* attr_name, rknn_custom_op_attr* op_attr) {
    if (op_ctx == NULL || attr_name == NULL || op_attr == NULL) {
        fprintf(stderr, "E rknn_custom_op_get_op_attr: op_ctx, attr_name and op_attr must not be NULL\n");
        return;
    }
    call_bridge("custom_op_get_op_attr", RKNN_ERR_FAIL, "(KKK)", PTR(op_ctx), PTR(attr_name), PTR(op_attr));
}

/* ---- matmul API ---- */
int rknn_matmul_create(rknn_matmul_ctx* ctx, rknn_matmul_info* info, rknn_matmul_io_attr* io_attr) {
    return (int)call_bridge("matmul_create", RKNN_ERR_FAIL, "(KKK)", PTR(ctx), PTR(info), PTR(io_attr));
}

int rknn_matmul_create_dynamic_shape(rknn_matmul_ctx* ctx, rknn_matmul_info* info, int shape_num,
                                     rknn_matmul_shape dynamic_shapes[], rknn_matmul_io_attr io_attrs[]) {
    return (int)call_bridge("matmul_create_dynamic_shape", RKNN_ERR_FAIL, "(KKiKK)", PTR(ctx), PTR(info), shape_num,
                            PTR(dynamic_shapes), PTR(io_attrs));
}

int rknn_matmul_set_io_mem(rknn_matmul_ctx ctx, rknn_tensor_mem* mem, rknn_matmul_tensor_attr* attr) {
    return (int)call_bridge("matmul_set_io_mem", RKNN_ERR_FAIL, "(KKK)", CTX(ctx), PTR(mem), PTR(attr));
}

int rknn_matmul_set_core_mask(rknn_matmul_ctx context, rknn_core_mask core_mask) {
    return (int)call_bridge("matmul_set_core_mask", RKNN_ERR_FAIL, "(Ki)", CTX(context), (int)core_mask);
}

int rknn_matmul_set_quant_params(rknn_matmul_ctx context, rknn_quant_params* params) {
    return (int)call_bridge("matmul_set_quant_params", RKNN_ERR_FAIL, "(KK)", CTX(context), PTR(params));
}

int rknn_matmul_get_quant_params(rknn_matmul_ctx ctx, rknn_quant_params* params, float* scale) {
    return (int)call_bridge("matmul_get_quant_params", RKNN_ERR_FAIL, "(KKK)", CTX(ctx), PTR(params), PTR(scale));
}

int rknn_matmul_set_dynamic_shape(rknn_matmul_ctx ctx, rknn_matmul_shape* shape) {
    return (int)call_bridge("matmul_set_dynamic_shape", RKNN_ERR_FAIL, "(KK)", CTX(ctx), PTR(shape));
}

int rknn_matmul_run(rknn_matmul_ctx ctx) {
    return (int)call_bridge("matmul_run", RKNN_ERR_FAIL, "(K)", CTX(ctx));
}

int rknn_matmul_destroy(rknn_matmul_ctx ctx) {
    return (int)call_bridge("matmul_destroy", RKNN_ERR_FAIL, "(K)", CTX(ctx));
}

int rknn_B_normal_layout_to_native_layout(void* B_input, void* B_output, int K, int N, rknn_matmul_info* info) {
    return (int)call_bridge("B_normal_layout_to_native_layout", RKNN_ERR_FAIL, "(KKiiK)", PTR(B_input),
                            PTR(B_output), K, N, PTR(info));
}
