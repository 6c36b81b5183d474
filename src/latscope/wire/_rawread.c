/*
 * latscope.wire._rawread: the compiled read path of a kernel-stamped connection (optional).
 *
 * A StampedReader is the callable a kernel-stamped connection registers on the event loop (loop.add_reader) for its
 * socket. Each call does what latscope.wire.rawsock.StampedSocket._on_readable does in Python, in one C call:
 *
 *   recvmsg(fd) into a buffer the reader keeps, with room for one SCM_TIMESTAMPNS control message;
 *   the user-space stamp (CLOCK_MONOTONIC, ns) as soon as recvmsg returned;
 *   the kernel's stamp (CLOCK_REALTIME, ns) put on the monotonic clock with the process's ClockOffset, whose
 *   offset_ns is used until its next_ns and measured again by calling its refresh(now_ns) after that;
 *   deliver(data, kernel_ns, user_ns) for a stamped read, deliver(data, user_ns, None) for a read without a usable
 *   stamp (none came, or it was later than the read itself even after measuring the offset again), counted in
 *   unstamped_reads; on_eof() when the peer closed; on_error(OSError) when the read failed.
 *
 * The Python reader stays the reference and the fallback: both must behave alike (tests/wire/test_rawread.py runs
 * the same cases through each). Times are int nanoseconds throughout.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#ifndef SO_TIMESTAMPNS
#define SO_TIMESTAMPNS 35
#endif
#ifndef SCM_TIMESTAMPNS
#define SCM_TIMESTAMPNS SO_TIMESTAMPNS
#endif

#define NS_PER_S 1000000000LL

typedef struct {
    PyObject_HEAD
    int fd;                    /* -1 once closed */
    PyObject *deliver;         /* deliver(data, at_ns, user_ns | None) */
    PyObject *on_eof;          /* on_eof() */
    PyObject *on_error;        /* on_error(OSError) */
    PyObject *clock;           /* the ClockOffset: offset_ns, next_ns, refresh(now_ns) */
    long long offset_ns;       /* cached clock.offset_ns ... */
    long long next_ns;         /* ... valid while the monotonic time is below this */
    char *buffer;              /* read_bytes bytes, reused by every read */
    Py_ssize_t read_bytes;
    unsigned long long unstamped_reads;
} StampedReader;

static PyObject *str_offset_ns, *str_next_ns, *str_refresh;

static int
attr_as_ll(PyObject *obj, PyObject *name, long long *out)
{
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL)
        return -1;
    *out = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* clock.refresh(now_ns): measure the offset again; caches the new offset and next_ns. */
static int
refresh_offset(StampedReader *self, long long now_ns)
{
    PyObject *now = PyLong_FromLongLong(now_ns);
    if (now == NULL)
        return -1;
    PyObject *offset = PyObject_CallMethodOneArg(self->clock, str_refresh, now);
    Py_DECREF(now);
    if (offset == NULL)
        return -1;
    self->offset_ns = PyLong_AsLongLong(offset);
    Py_DECREF(offset);
    if (self->offset_ns == -1 && PyErr_Occurred())
        return -1;
    return attr_as_ll(self->clock, str_next_ns, &self->next_ns);
}

/* The offset to use at monotonic time now_ns: the cached one, the shared clock's when another reader measured it
 * since, or a new measurement, exactly as ClockOffset.to_monotonic decides. */
static int
current_offset(StampedReader *self, long long now_ns)
{
    if (now_ns < self->next_ns)
        return 0;
    long long shared_next;
    if (attr_as_ll(self->clock, str_next_ns, &shared_next) < 0)
        return -1;
    if (now_ns < shared_next) {
        self->next_ns = shared_next;
        return attr_as_ll(self->clock, str_offset_ns, &self->offset_ns);
    }
    return refresh_offset(self, now_ns);
}

static PyObject *
deliver3(PyObject *deliver, PyObject *data, PyObject *at, PyObject *user)
{
    PyObject *args[3] = {data, at, user};
    return PyObject_Vectorcall(deliver, args, 3, NULL);
}

static PyObject *
StampedReader_call(StampedReader *self, PyObject *args, PyObject *kwargs)
{
    if (self->fd < 0 || self->buffer == NULL) /* closed, or never initialised */
        Py_RETURN_NONE;

    union {
        char bytes[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {.iov_base = self->buffer, .iov_len = (size_t)self->read_bytes};
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.bytes;
    msg.msg_controllen = sizeof(control.bytes);

    ssize_t n = recvmsg(self->fd, &msg, 0);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long user_ns = (long long)now.tv_sec * NS_PER_S + now.tv_nsec;

    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            Py_RETURN_NONE;
        int error = errno;
        /* OSError(errno, strerror) gives the subclass Python would raise (ConnectionResetError, ...) */
        PyObject *exc = PyObject_CallFunction(PyExc_OSError, "is", error, strerror(error));
        if (exc == NULL)
            return NULL;
        PyObject *on_error = Py_NewRef(self->on_error); /* the call may close the reader, which drops its own */
        PyObject *result = PyObject_CallOneArg(on_error, exc);
        Py_DECREF(on_error);
        Py_DECREF(exc);
        if (result == NULL)
            return NULL;
        Py_DECREF(result);
        Py_RETURN_NONE;
    }
    if (n == 0) {
        PyObject *on_eof = Py_NewRef(self->on_eof);
        PyObject *result = PyObject_CallNoArgs(on_eof);
        Py_DECREF(on_eof);
        return result;
    }

    long long kernel_ns = -1;
    for (struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg); cmsg != NULL; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
        if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_TIMESTAMPNS &&
            cmsg->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec stamp;
            memcpy(&stamp, CMSG_DATA(cmsg), sizeof(stamp));
            kernel_ns = (long long)stamp.tv_sec * NS_PER_S + stamp.tv_nsec;
            break;
        }
    }

    long long at_ns = -1;
    if (kernel_ns >= 0) {
        if (current_offset(self, user_ns) < 0)
            return NULL;
        at_ns = kernel_ns - self->offset_ns;
        if (at_ns > user_ns) {
            /* later than the read itself: the realtime clock was stepped since the offset was measured */
            if (refresh_offset(self, user_ns) < 0)
                return NULL;
            at_ns = kernel_ns - self->offset_ns;
        }
        if (at_ns > user_ns)
            at_ns = -1;
    }

    PyObject *data = PyBytes_FromStringAndSize(self->buffer, n);
    if (data == NULL)
        return NULL;
    PyObject *user = PyLong_FromLongLong(user_ns);
    if (user == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    PyObject *result;
    PyObject *deliver = Py_NewRef(self->deliver); /* delivering may close the reader, which drops its own */
    if (at_ns >= 0) {
        PyObject *at = PyLong_FromLongLong(at_ns);
        if (at == NULL) {
            Py_DECREF(deliver);
            Py_DECREF(data);
            Py_DECREF(user);
            return NULL;
        }
        result = deliver3(deliver, data, at, user);
        Py_DECREF(at);
    } else {
        self->unstamped_reads++;
        result = deliver3(deliver, data, user, Py_None);
    }
    Py_DECREF(deliver);
    Py_DECREF(data);
    Py_DECREF(user);
    return result;
}

static void
StampedReader_clear_refs(StampedReader *self)
{
    Py_CLEAR(self->deliver);
    Py_CLEAR(self->on_eof);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->clock);
}

static int
StampedReader_init(StampedReader *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"fd", "deliver", "on_eof", "on_error", "clock", "read_bytes", NULL};
    int fd;
    PyObject *deliver, *on_eof, *on_error, *clock;
    Py_ssize_t read_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOOOOn:StampedReader", keywords, &fd, &deliver, &on_eof,
                                     &on_error, &clock, &read_bytes))
        return -1;
    if (fd < 0) {
        PyErr_SetString(PyExc_ValueError, "fd must be a socket's file descriptor (>= 0)");
        return -1;
    }
    if (read_bytes <= 0) {
        PyErr_SetString(PyExc_ValueError, "read_bytes must be positive");
        return -1;
    }
    char *buffer = PyMem_Realloc(self->buffer, (size_t)read_bytes);
    if (buffer == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->buffer = buffer;
    self->read_bytes = read_bytes;
    StampedReader_clear_refs(self);
    self->fd = fd;
    self->deliver = Py_NewRef(deliver);
    self->on_eof = Py_NewRef(on_eof);
    self->on_error = Py_NewRef(on_error);
    self->clock = Py_NewRef(clock);
    self->offset_ns = 0;
    self->next_ns = 0; /* the first stamp consults the clock */
    self->unstamped_reads = 0;
    return 0;
}

static PyObject *
StampedReader_close(StampedReader *self, PyObject *Py_UNUSED(ignored))
{
    self->fd = -1;
    StampedReader_clear_refs(self);
    Py_RETURN_NONE;
}

static int
StampedReader_traverse(StampedReader *self, visitproc visit, void *arg)
{
    Py_VISIT(self->deliver);
    Py_VISIT(self->on_eof);
    Py_VISIT(self->on_error);
    Py_VISIT(self->clock);
    return 0;
}

static int
StampedReader_gc_clear(StampedReader *self)
{
    StampedReader_clear_refs(self);
    return 0;
}

static void
StampedReader_dealloc(StampedReader *self)
{
    PyObject_GC_UnTrack(self);
    StampedReader_clear_refs(self);
    PyMem_Free(self->buffer);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef StampedReader_methods[] = {
    {"close", (PyCFunction)StampedReader_close, METH_NOARGS,
     "Stop for good: later calls return at once and the callables are released."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef StampedReader_members[] = {
    {"unstamped_reads", T_ULONGLONG, offsetof(StampedReader, unstamped_reads), READONLY,
     "reads delivered with their user-space stamp alone"},
    {"fd", T_INT, offsetof(StampedReader, fd), READONLY, "the socket read; -1 once closed"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject StampedReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "latscope.wire._rawread.StampedReader",
    .tp_doc = PyDoc_STR("StampedReader(fd, deliver, on_eof, on_error, clock, read_bytes): one kernel-stamped read "
                        "per call, for loop.add_reader."),
    .tp_basicsize = sizeof(StampedReader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)StampedReader_init,
    .tp_dealloc = (destructor)StampedReader_dealloc,
    .tp_traverse = (traverseproc)StampedReader_traverse,
    .tp_clear = (inquiry)StampedReader_gc_clear,
    .tp_call = (ternaryfunc)StampedReader_call,
    .tp_methods = StampedReader_methods,
    .tp_members = StampedReader_members,
};

static struct PyModuleDef rawread_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "latscope.wire._rawread",
    .m_doc = PyDoc_STR("The compiled read path of a kernel-stamped connection (see latscope.wire.rawsock)."),
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__rawread(void)
{
    str_offset_ns = PyUnicode_InternFromString("offset_ns");
    str_next_ns = PyUnicode_InternFromString("next_ns");
    str_refresh = PyUnicode_InternFromString("refresh");
    if (str_offset_ns == NULL || str_next_ns == NULL || str_refresh == NULL)
        return NULL;
    if (PyType_Ready(&StampedReaderType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&rawread_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "StampedReader", (PyObject *)&StampedReaderType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
