/*
 * latscope.dialects._templatefit: the compiled fit of a run of token events to an EventTemplate (optional).
 *
 * texts(values, pieces, kinds, text_hole) -> list[str] | None
 *
 *   values     the events' JSON texts (str), in order
 *   pieces     the template's constant pieces (str), one more than the holes; a string hole's quotes belong to
 *              the pieces around it (pieces[i] ends with the opening quote, pieces[i + 1] starts with the closing)
 *   kinds      bytes, one per hole: b's' a string hole (the text hole included), b'n' a number hole
 *   text_hole  which hole holds the text
 *
 * Each value must be exactly the pieces with, in between: in a string hole, characters none of which is a quote, a
 * backslash, a control character (below U+0020) or a lone surrogate, the text hole not empty; in a number hole, one
 * JSON number (RFC 8259 section 6) below 1e300 (a parser refuses one that is infinite as a double), nothing around
 * it. Then the value is the learnt event but for its holes'
 * values (see latscope.dialects.templates), and its text is the text hole's characters, returned for every value.
 * Anything else gives None, and the caller runs the Python fit (EventTemplate.texts), which also accepts what this
 * one is stricter about (other JSON values in a number hole, whitespace around them): this never accepts a value the
 * Python fit refuses, nor gives another text.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static int
starts_with(PyObject *value, Py_ssize_t at, PyObject *piece)
{
    Py_ssize_t size = PyUnicode_GET_LENGTH(piece);
    if (at + size > PyUnicode_GET_LENGTH(value))
        return 0;
    if (size == 0)
        return 1;
    return PyUnicode_Tailmatch(value, piece, at, at + size, -1) == 1;
}

/* The end of the string hole's characters from at (the closing quote's index), or -1 when a character is refused. */
static Py_ssize_t
string_end(int kind, const void *data, Py_ssize_t at, Py_ssize_t size)
{
    for (; at < size; at++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, at);
        if (c == '"')
            return at;
        if (c == '\\' || c < 0x20 || (c >= 0xD800 && c <= 0xDFFF))
            return -1;
    }
    return -1;
}

static inline int
is_digit(Py_UCS4 c)
{
    return c >= '0' && c <= '9';
}

/* Most a number's integer digits (none for a leading 0) plus its exponent may come to: below 1e300, far from a double's infinity (which
 * a JSON parser refuses: orjson does), so every number this fit accepts, the parser takes. */
#define MAX_MAGNITUDE 300

/* The end of one JSON number starting at at (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?) whose magnitude is
 * below 10^MAX_MAGNITUDE, or -1. */
static Py_ssize_t
number_end(int kind, const void *data, Py_ssize_t at, Py_ssize_t size)
{
#define AT(i) ((i) < size ? PyUnicode_READ(kind, data, (i)) : 0)
    if (AT(at) == '-')
        at++;
    Py_ssize_t magnitude = 0; /* the integer part's digits: 0 for a leading 0 */
    if (AT(at) == '0')
        at++;
    else if (AT(at) >= '1' && AT(at) <= '9')
        while (is_digit(AT(at))) {
            at++;
            magnitude++;
        }
    else
        return -1;
    if (AT(at) == '.') {
        at++;
        if (!is_digit(AT(at)))
            return -1;
        while (is_digit(AT(at)))
            at++;
    }
    if (AT(at) == 'e' || AT(at) == 'E') {
        at++;
        int negative = AT(at) == '-';
        if (AT(at) == '+' || AT(at) == '-')
            at++;
        if (!is_digit(AT(at)))
            return -1;
        Py_ssize_t exponent = 0;
        while (is_digit(AT(at))) {
            exponent = exponent * 10 + (Py_ssize_t)(AT(at) - '0');
            if (exponent > MAX_MAGNITUDE && !negative)
                return -1;
            if (exponent > MAX_MAGNITUDE)
                exponent = MAX_MAGNITUDE; /* a tiny number: only its size matters, not its digits */
            at++;
        }
        if (!negative)
            magnitude += exponent;
    }
    return magnitude > MAX_MAGNITUDE ? -1 : at;
#undef AT
}

/* The text of value, a new reference; NULL without an exception when it does not fit, NULL with one on error. */
static PyObject *
fit_one(PyObject *value, PyObject *const *pieces, const char *kinds, Py_ssize_t holes, Py_ssize_t text_hole)
{
    if (!PyUnicode_Check(value))
        return NULL;
    int kind = PyUnicode_KIND(value);
    const void *data = PyUnicode_DATA(value);
    Py_ssize_t size = PyUnicode_GET_LENGTH(value);
    Py_ssize_t at = 0, text_start = 0, text_end = 0;
    for (Py_ssize_t hole = 0; hole < holes; hole++) {
        if (!starts_with(value, at, pieces[hole]))
            return NULL;
        at += PyUnicode_GET_LENGTH(pieces[hole]);
        Py_ssize_t end = kinds[hole] == 's' ? string_end(kind, data, at, size) : number_end(kind, data, at, size);
        if (end < 0)
            return NULL;
        if (hole == text_hole) {
            if (end == at)
                return NULL; /* an empty text */
            text_start = at;
            text_end = end;
        }
        at = end;
    }
    PyObject *last = pieces[holes];
    if (!starts_with(value, at, last) || at + PyUnicode_GET_LENGTH(last) != size)
        return NULL;
    return PyUnicode_Substring(value, text_start, text_end);
}

static PyObject *
texts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "texts(values, pieces, kinds, text_hole) takes 4 arguments");
        return NULL;
    }
    PyObject *values = args[0], *pieces = args[1], *kinds = args[2];
    if (!PyList_Check(values) || !PyTuple_Check(pieces) || !PyBytes_Check(kinds)) {
        PyErr_SetString(PyExc_TypeError, "texts: values must be a list, pieces a tuple, kinds bytes");
        return NULL;
    }
    Py_ssize_t holes = PyBytes_GET_SIZE(kinds);
    Py_ssize_t text_hole = PyLong_AsSsize_t(args[3]);
    if (text_hole == -1 && PyErr_Occurred())
        return NULL;
    if (PyTuple_GET_SIZE(pieces) != holes + 1 || text_hole < 0 || text_hole >= holes) {
        PyErr_SetString(PyExc_ValueError, "texts: pieces must be one more than kinds, text_hole one of the holes");
        return NULL;
    }
    PyObject *const *piece = &PyTuple_GET_ITEM(pieces, 0);
    for (Py_ssize_t i = 0; i <= holes; i++) {
        if (!PyUnicode_Check(piece[i])) {
            PyErr_SetString(PyExc_TypeError, "texts: every piece must be a str");
            return NULL;
        }
    }
    const char *kind = PyBytes_AS_STRING(kinds);
    if (kind[text_hole] != 's') {
        PyErr_SetString(PyExc_ValueError, "texts: the text hole must be a string hole");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(values);
    PyObject *result = PyList_New(count);
    if (result == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *text = fit_one(PyList_GET_ITEM(values, i), piece, kind, holes, text_hole);
        if (text == NULL) {
            Py_DECREF(result);
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_NONE;
        }
        PyList_SET_ITEM(result, i, text);
    }
    return result;
}

static PyMethodDef templatefit_methods[] = {
    {"texts", (PyCFunction)(void (*)(void))texts, METH_FASTCALL,
     "texts(values, pieces, kinds, text_hole): each value's text when every one fits the template exactly, else "
     "None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef templatefit_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "latscope.dialects._templatefit",
    .m_doc = PyDoc_STR("The compiled fit of token events to a template (see latscope.dialects.templates)."),
    .m_size = -1,
    .m_methods = templatefit_methods,
};

PyMODINIT_FUNC
PyInit__templatefit(void)
{
    return PyModule_Create(&templatefit_module);
}
