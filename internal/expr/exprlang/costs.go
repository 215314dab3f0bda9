package exprlang

// The cost model: what every builtin, operator, function and node kind an
// expression can run costs, as a function of its inputs' sizes. The budget
// patch (budget.go) meters each one as its entry says, and refuses to compile
// an expression that uses anything without an entry, so an expr-lang upgrade
// that adds a builtin or an operator cannot add one that runs unmetered
// (TestCostTableCoversExprLang enumerates expr-lang's own lists). The table
// is also the documentation: docs/concepts/evaluation-budget.md renders it
// (hack/costdocs writes it; `make docs` fails when it is stale).

import (
	"maps"
	"slices"
)

// metering is how the budget patch charges one entry.
type metering int

const (
	// Runs in constant time whatever its input; its node is paid by the
	// expression's size.
	meterConstant metering = iota
	// A predicate: its body's size is charged on every iteration, as the
	// iteration ends (so the loop can be stopped mid-way), and what it
	// builds when it is done.
	meterLoop
	// A predicate whose body yields keys the builtin then hashes
	// (groupBy) or compares (sortBy): each iteration also pays for reading
	// its key, sortBy once per comparison level.
	meterKeyedLoop
	// Reads the strings it is given: one operation per 16 bytes of each
	// string argument; other arguments are read in constant time.
	meterStrings
	// Reads its arguments deeply (every element and every 16 bytes) and
	// charges what it builds.
	meterScan
	// Sorts: reads its argument deeply once per comparison level
	// (log2 of its length).
	meterSort
	// Compares every element with every other (uniq): reads its argument
	// deeply once per element.
	meterQuadratic
	// Builds a result no larger than what it reads and reads no more than
	// it builds: charging the result is enough.
	meterLinear
	// Builds a value as large as its argument is when fully expanded
	// (shared branches counted each time): charged before it builds.
	meterExpand
	// Its own metering helper (join, replace, fromJSON, trim, matches,
	// glob, the lookups): see the entry's text.
	meterSpecial
	// Not available in rules.
	meterDisabled
)

// A cost is one row of the cost model.
type cost struct {
	meter metering
	// charge says what the evaluation is charged, for the docs.
	charge string
}

// Charges shared by several rows.
const (
	chargeConstant = "1"
	chargeLoop     = "1 and 512 bytes to start; the body's size per iteration, charged as each iteration ends"
	chargeBuilt    = "1 + what it builds (bytes, 16 per element)"
	chargeStrings  = "1 + 1 per 16 bytes of each string argument"
	chargeScan     = "1 per element and per 16 bytes of its arguments, read deeply; + what it builds"
	chargeCompare  = "1 per element and per 16 bytes of the left operand, read deeply (1 when either side is a literal)"
)

// builtinCosts has a row for every builtin expr-lang defines, enabled or
// not.
var builtinCosts = map[string]cost{
	"all":           {meterLoop, chargeLoop},
	"none":          {meterLoop, chargeLoop},
	"any":           {meterLoop, chargeLoop},
	"one":           {meterLoop, chargeLoop},
	"find":          {meterLoop, chargeLoop},
	"findIndex":     {meterLoop, chargeLoop},
	"findLast":      {meterLoop, chargeLoop},
	"findLastIndex": {meterLoop, chargeLoop},
	"count":         {meterLoop, chargeLoop},
	"sum":           {meterLoop, chargeLoop},
	"reduce":        {meterLoop, chargeLoop + "; the accumulator pays for what its operators build"},
	"filter":        {meterLoop, chargeLoop + "; + the array it builds"},
	"map":           {meterLoop, chargeLoop + "; + the array it builds"},
	"groupBy":       {meterKeyedLoop, chargeLoop + " + 1 per 16 bytes of each key (hashed); + the map it builds"},
	"sortBy":        {meterKeyedLoop, chargeLoop + " + 20 x (1 per element and per 16 bytes of each key) (compared once per level of the sort); + the array it builds"},

	"len":      {meterStrings, chargeStrings + " (a string's characters are counted)"},
	"int":      {meterStrings, chargeStrings + " (a string is parsed)"},
	"float":    {meterStrings, chargeStrings + " (a string is parsed)"},
	"duration": {meterStrings, chargeStrings + " (parsed)"},
	"date":     {meterStrings, chargeStrings + " (parsed); + 1,000 when it names a time zone (a zone file is read)"},

	"type":    {meterConstant, chargeConstant},
	"abs":     {meterConstant, chargeConstant},
	"ceil":    {meterConstant, chargeConstant},
	"floor":   {meterConstant, chargeConstant},
	"round":   {meterConstant, chargeConstant},
	"first":   {meterConstant, chargeConstant},
	"last":    {meterConstant, chargeConstant},
	"get":     {meterStrings, chargeStrings + " (a key is hashed)"},
	"bitnot":  {meterConstant, chargeConstant},
	"bitand":  {meterConstant, chargeConstant},
	"bitor":   {meterConstant, chargeConstant},
	"bitxor":  {meterConstant, chargeConstant},
	"bitnand": {meterConstant, chargeConstant},
	"bitshl":  {meterConstant, chargeConstant},
	"bitshr":  {meterConstant, chargeConstant},
	"bitushr": {meterConstant, chargeConstant},

	"string":  {meterExpand, "1 per element and per 16 bytes of its argument fully expanded; + as many bytes, charged before it builds"},
	"toJSON":  {meterSpecial, "1 per element and per 16 bytes of its argument fully expanded; + the indented JSON it makes (two spaces per level on every line, escapes included), charged before it builds"},
	"flatten": {meterExpand, "1 per element and per 16 bytes of its argument fully expanded; + as many bytes, charged before it builds"},

	"upper":      {meterLinear, chargeBuilt},
	"lower":      {meterLinear, chargeBuilt},
	"toBase64":   {meterLinear, chargeBuilt},
	"fromBase64": {meterLinear, chargeBuilt},
	"keys":       {meterLinear, chargeBuilt},
	"values":     {meterLinear, chargeBuilt},
	"toPairs":    {meterLinear, chargeBuilt},
	"fromPairs":  {meterLinear, chargeBuilt},
	"concat":     {meterSpecial, "1 + 1 per element of its arguments; + 16 bytes per element, charged before it builds"},
	"reverse":    {meterLinear, chargeBuilt},
	"take":       {meterLinear, chargeBuilt},

	"trimPrefix":  {meterScan, chargeScan},
	"trimSuffix":  {meterScan, chargeScan},
	"indexOf":     {meterScan, chargeScan},
	"lastIndexOf": {meterScan, chargeScan},
	"hasPrefix":   {meterScan, chargeScan},
	"hasSuffix":   {meterScan, chargeScan},
	"max":         {meterScan, chargeScan},
	"min":         {meterScan, chargeScan},
	"mean":        {meterScan, chargeScan},

	"sort":   {meterSort, "log2(n) x (1 per element and per 16 bytes of its argument, read deeply); + what it builds"},
	"median": {meterSort, "log2(n) x (1 per element and per 16 bytes of its argument, read deeply)"},
	"uniq":   {meterQuadratic, "n x (1 per element and per 16 bytes of its argument, read deeply): each element is compared with every one kept; + what it builds"},

	"trim":       {meterSpecial, "1 + (1 per 16 bytes of the string) x (1 per 16 bytes of the cutset); + what it builds"},
	"join":       {meterSpecial, "its argument read deeply; + the joined string (separators included), charged before it is built"},
	"replace":    {meterSpecial, "1 per 16 bytes of the string; + the result (every insertion of the new string), charged before it is built"},
	"split":      {meterSpecial, "1 per 16 bytes of the string and the separator; + the pieces, 16 bytes each (one per character for an empty separator), charged before it splits"},
	"splitAfter": {meterSpecial, "1 per 16 bytes of the string and the separator; + the pieces, 16 bytes each (one per character for an empty separator), charged before it splits"},
	"fromJSON":   {meterSpecial, "1 per 16 bytes of its input, + 16 bytes per byte of input (a decoded document is mostly headers), charged before it decodes"},

	"now":      {meterDisabled, "disabled: a verdict must not depend on when it was computed"},
	"repeat":   {meterDisabled, "disabled: no rule needs to build large strings"},
	"timezone": {meterDisabled, "disabled: it reads a zone file, and without now() no rule needs it"},
}

// operatorCosts has a row for every operator expr-lang's parser knows, unary
// and binary.
var operatorCosts = map[string]cost{
	"not": {meterConstant, chargeConstant},
	"!":   {meterConstant, chargeConstant},
	"-":   {meterConstant, chargeConstant + " (numbers, times and durations)"},
	"+":   {meterLinear, "1 on numbers; strings and arrays: + what it builds"},
	"*":   {meterConstant, chargeConstant},
	"/":   {meterConstant, chargeConstant},
	"%":   {meterConstant, chargeConstant},
	"**":  {meterConstant, chargeConstant},
	"^":   {meterConstant, chargeConstant},
	"and": {meterConstant, chargeConstant},
	"&&":  {meterConstant, chargeConstant},
	"or":  {meterConstant, chargeConstant},
	"||":  {meterConstant, chargeConstant},
	"??":  {meterConstant, chargeConstant},
	"|":   {meterConstant, "the parser rewrites `a | f(b)` into `f(a, b)`: the call's cost"},
	"..":  {meterLinear, "the range it builds, 16 bytes per element (with literal bounds, charged when the evaluation starts)"},

	"==": {meterScan, chargeCompare},
	"!=": {meterScan, chargeCompare},
	"<":  {meterScan, chargeCompare},
	">":  {meterScan, chargeCompare},
	"<=": {meterScan, chargeCompare},
	">=": {meterScan, chargeCompare},

	"in":         {meterScan, "1 per 16 bytes of a string on the left (hashed); + 1 on a map, or on an array 1 per element and per 16 bytes, read deeply"},
	"contains":   {meterScan, "1 per 16 bytes of both operands"},
	"startsWith": {meterScan, "1 per 16 bytes of the prefix"},
	"endsWith":   {meterScan, "1 per 16 bytes of the suffix"},
	"matches": {meterSpecial, "(1 + the subject's length in bytes) x the pattern's program size, at most " +
		"2,000 instructions; a pattern that is not a literal: its compilation too, 64 bytes per instruction"},
}

// functionCosts has a row for every function Portal adds.
var functionCosts = map[string]cost{
	"quantity":                  {meterScan, chargeScan},
	"parseImage":                {meterScan, chargeScan},
	"selects":                   {meterScan, chargeScan},
	"glob":                      {meterSpecial, "(1 + the pattern's length) x (1 + the name's length) / 16; patterns of at most 1,024 bytes"},
	"cluster.<resource>.byName": {meterSpecial, "10; cluster.consistent: 1,000 and one of the 16 API reads, + its object as toJSON would read it"},
	"cluster.<resource>.list":   {meterSpecial, "10 + 1 per object and 16 bytes per object it returns; cluster.consistent: 1,000 per page and one API read, + its objects as toJSON would read them"},
	"methods of values (time.Time, time.Duration)": {meterStrings, chargeStrings + "; + what it builds"},
}

// nodeCosts describes the nodes that are neither operators nor calls, in
// the order the docs list them. Each runs in constant time and is paid by the
// expression's size when the evaluation starts.
var nodeCosts = []struct{ node, charge string }{
	{"literals, names, `#`, `#acc`, `#index`", chargeConstant},
	{"member access `a.b`, `a?.b`", chargeConstant + " (a map lookup)"},
	{"computed member access `a[k]`, `a?.[k]`", chargeStrings + " (a string key is hashed; an index is 1)"},
	{"slices `a[i:j]`", chargeConstant + " (strings and arrays are sliced in place)"},
	{"`c ? x : y`, `if c { x } else { y }`, `let x = ...; e`, `e1; e2`", chargeConstant},
	{"array and map literals `[...]`, `{...}`", "1 per element written"},
}

// CostRow is one row of the cost model as the docs show it.
type CostRow struct {
	// Section is "builtins", "operators", "functions" or "other nodes".
	Section string
	// Name is the builtin, operator, function or node kind.
	Name string
	// Charge is what an evaluation is charged for it, in operations and
	// bytes built.
	Charge string
}

// CostModel lists the cost model, sorted by section and name, for
// hack/costdocs.
func CostModel() []CostRow {
	var rows []CostRow
	add := func(section string, table map[string]cost) {
		for _, name := range slices.Sorted(maps.Keys(table)) {
			rows = append(rows, CostRow{section, name, table[name].charge})
		}
	}
	add("builtins", builtinCosts)
	add("operators", operatorCosts)
	add("functions", functionCosts)
	for _, n := range nodeCosts {
		rows = append(rows, CostRow{"other nodes", n.node, n.charge})
	}
	return rows
}
