package depgraph

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/tools/go/packages"
)

// ratchetFile lists, one "pkg.Ident" a line, the public exports that were
// used only inside the module when the check came in (issue 23). It may
// only shrink: TestPublicAPIIsUsedByOutsiders fails on a violator missing
// from it and on a line that no longer names one.
const ratchetFile = "testdata/harness-only-api.txt"

// class says who references an exported identifier, seen from the
// identifier's package.
type class int

const (
	// self: the identifier's own package, its tests (in package P or
	// P_test) included, Example functions excepted.
	self class = iota
	// machinery: the module's packages under internal/ or cmd/, their
	// tests included (internal/outsider excepted).
	machinery
	// moduleTest: the tests of the module's other public packages
	// (those with test files only among them), Example functions excepted.
	moduleTest
	// outsider: code that uses harmless the way a user does; see
	// TestPublicAPIIsUsedByOutsiders.
	outsider
)

// area is where a file lies, which with the identifier's package decides
// its class.
type area int

const (
	areaPublic      area = iota // a package of the module outside internal/ and cmd/
	areaMachinery               // under internal/ or cmd/
	areaOutsider                // internal/outsider, its testdata consumers, examples/
	areaIntegration             // the integrations module
	areaReadme                  // a Go code block of README.md
)

// file is one Go file whose references are counted.
type file struct {
	area  area
	pkg   string // the package path relative to its module's root ("suite" for suite_test too)
	label string // how messages name it: the package, "… tests", "… Example", "README.md"
	test  bool
}

// classFor is the class of a reference from f to an identifier of package
// owner (relative path), inExample when it lies in an Example function.
func (f file) classFor(owner string, inExample bool) class {
	switch f.area {
	case areaMachinery:
		return machinery
	case areaOutsider, areaIntegration, areaReadme:
		return outsider
	}
	switch {
	case inExample:
		return outsider
	case f.pkg == owner:
		return self
	case f.test:
		return moduleTest
	default:
		return outsider
	}
}

// export is one exported identifier of a public package.
type export struct {
	key   string // "pkg.Ident", "pkg.Type.Method" or "pkg.Type.Field"
	level bool   // declared at package level
}

// usage is who references an export, by class, each a set of labels.
type usage struct {
	by  [outsider + 1]map[string]bool
	via string // an outsider-used export whose type names this one
}

func (u *usage) add(c class, label string) {
	if u.by[c] == nil {
		u.by[c] = map[string]bool{}
	}
	u.by[c][label] = true
}

// usedOutside reports whether outsiders reference the export, directly or
// through the type of one they reference.
func (u *usage) usedOutside() bool { return len(u.by[outsider]) > 0 || u.via != "" }

// why says, for a violator, who does reference it.
func (u *usage) why() string {
	var parts []string
	if m := u.by[machinery]; len(m) > 0 {
		parts = append(parts, "the harness's machinery ("+strings.Join(sortedKeys(m), ", ")+")")
	}
	if m := u.by[moduleTest]; len(m) > 0 {
		parts = append(parts, "the tests of public packages ("+strings.Join(sortedKeys(m), ", ")+")")
	}
	switch {
	case len(parts) > 0:
		return "used only by " + strings.Join(parts, " and ")
	case len(u.by[self]) > 0:
		return "used only inside its own package"
	default:
		return "referenced by nothing: dead API"
	}
}

// apiReport is the outcome of the analysis: the exports of every public
// package and who references each.
type apiReport struct {
	public  []string             // the public packages, relative paths, sorted
	exports map[string][]*export // by package
	uses    map[string]*usage    // by key
	readme  int                  // Go code blocks of README.md type-checked
	took    time.Duration        // how long loading and analysing took
}

func (r *apiReport) usage(key string) *usage {
	u := r.uses[key]
	if u == nil {
		u = &usage{}
		r.uses[key] = u
	}
	return u
}

// violators returns the keys of pkg's exports that no outsider uses.
func (r *apiReport) violators(pkg string) (all, level []string) {
	for _, e := range r.exports[pkg] {
		if !r.usage(e.key).usedOutside() {
			all = append(all, e.key)
			if e.level {
				level = append(level, e.key)
			}
		}
	}
	return all, level
}

// withinModule returns the keys of pkg's exports that outsiders use, but
// only the module's other public packages among them (suite uses faults'
// plans and the certificate's builders): not violators by the definition,
// but no user's API either, for issue 23's record.
func (r *apiReport) withinModule(pkg string) []string {
	isPublic := map[string]bool{}
	for _, p := range r.public {
		isPublic[p] = true
	}
	var within func(key string) bool
	within = func(key string) bool {
		u := r.usage(key)
		if !u.usedOutside() {
			return false
		}
		for label := range u.by[outsider] {
			if !isPublic[label] {
				return false
			}
		}
		return u.via == "" || within(u.via)
	}
	var keys []string
	for _, e := range r.exports[pkg] {
		if within(e.key) {
			keys = append(keys, e.key)
		}
	}
	return keys
}

// analysis loads the module and the integrations module once for the
// tests of this file: it takes most of their time.
var analysis = sync.OnceValues(func() (*apiReport, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return nil, err
	}
	start := time.Now()
	r, err := analyze(context.Background(), root)
	if r != nil {
		r.took = time.Since(start)
	}
	return r, err
})

// loadMode is what the analysis needs of each package: its syntax and the
// objects its identifiers refer to. Dependencies come from export data,
// so only the loaded packages are type-checked from source.
const loadMode = packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles |
	packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo

// load loads patterns, their tests included, in dir and fails on any error:
// a package that does not type-check would hide its references.
func load(ctx context.Context, dir string, patterns ...string) ([]*packages.Package, error) {
	cfg := &packages.Config{Context: ctx, Dir: dir, Mode: loadMode, Tests: true, Env: append(os.Environ(), "GOWORK=off")}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, fmt.Errorf("loading %s in %s: %w", strings.Join(patterns, " "), dir, err)
	}
	var errs []error
	for _, p := range pkgs {
		for _, e := range p.Errors {
			errs = append(errs, fmt.Errorf("%s: %s", p.ID, e))
		}
	}
	return pkgs, errors.Join(errs...)
}

func analyze(ctx context.Context, root string) (*apiReport, error) {
	// internal/outsider certifies the consumers in its testdata from a
	// module of their own; go list's ./... skips testdata, so name them.
	patterns := []string{"./..."}
	dirs, err := os.ReadDir(filepath.Join(root, "internal", "outsider", "testdata"))
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		if d.IsDir() {
			patterns = append(patterns, "./internal/outsider/testdata/"+d.Name())
		}
	}
	// examples/ holds no Go today; a Go example in it is loaded with the
	// module, unless it is a module of its own, which would go unread.
	err = filepath.WalkDir(filepath.Join(root, "examples"), func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == "node_modules":
			return filepath.SkipDir // the Node.js example's packages, after npm ci
		case d.Name() == "go.mod":
			return fmt.Errorf("%s makes a module that this check does not load: load it as the integrations module is", path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	mod, err := load(ctx, root, patterns...)
	if err != nil {
		return nil, err
	}
	// The integrations module is loaded on its own: it has its own go.mod,
	// which replaces harmless by this checkout.
	integ, err := load(ctx, filepath.Join(root, "integrations"), "./...")
	if err != nil {
		return nil, err
	}

	r := &apiReport{exports: map[string][]*export{}, uses: map[string]*usage{}}
	isPublic := map[string]bool{}
	var roots []*types.Package // the non-test variants of the module's packages
	for _, p := range mod {
		if p.ID != p.PkgPath {
			continue // a test variant or a test's main package
		}
		roots = append(roots, p.Types)
		rel, ok := relative(p.PkgPath)
		// A package with test files only (suite/embedtest) exports nothing.
		if ok && p.Name != "main" && !isMachinery(rel) && !isExample(rel) && len(p.Types.Scope().Names()) > 0 {
			isPublic[p.PkgPath] = true
			r.public = append(r.public, rel)
		}
	}
	slices.Sort(r.public)
	keys := newKeyer(isPublic)

	// A method that satisfies an interface of the standard library, of
	// another module or of a public package, or one that the standard
	// library calls through an unnamed interface (errors.Unwrap's), is
	// that interface's contract, called through it: it is no export of its
	// own, since unexporting it would break the type's use as that
	// interface. One that satisfies only an interface of the machinery is
	// used by the machinery.
	contract, harness := methodIndex(closure(roots)), map[string][]iface{}
	for _, tp := range closure(roots) {
		if rel, ok := relative(tp.Path()); ok && isMachinery(rel) {
			for _, tn := range interfaces(tp, false) {
				harness = index(harness, iface{tn.Type().Underlying().(*types.Interface), rel + " (through its interface " + tn.Name() + ")"})
			}
		}
	}
	byKey := map[string]types.Object{}
	for _, p := range mod {
		if p.ID != p.PkgPath || !isPublic[p.PkgPath] {
			continue
		}
		rel, _ := relative(p.PkgPath)
		for obj, key := range keys.of(p.Types) {
			if fn, ok := obj.(*types.Func); ok && fn.Signature().Recv() != nil && !types.IsInterface(fn.Signature().Recv().Type()) {
				if len(satisfied(contract, fn)) > 0 {
					continue
				}
				for _, by := range satisfied(harness, fn) {
					r.usage(key).add(machinery, by)
				}
			}
			byKey[key] = obj
			r.exports[rel] = append(r.exports[rel], &export{key: key, level: obj.Parent() == p.Types.Scope()})
		}
		slices.SortFunc(r.exports[rel], func(a, b *export) int { return strings.Compare(a.key, b.key) })
	}

	// References, file by file, from every package of both modules. A type
	// may implement a public interface without importing its package
	// (suite/container's Server and suite.ContainerServer), so each file
	// is checked against all the public interfaces its load holds.
	var modIfaces []*types.TypeName
	for i, set := range [][]*packages.Package{mod, integ} {
		pubIfaces := publicInterfaces(typesOf(set), isPublic)
		if i == 0 {
			modIfaces = pubIfaces
		}
		for _, p := range set {
			if strings.HasSuffix(p.ID, ".test") {
				continue // the generated main package of a test
			}
			for _, f := range p.Syntax {
				name := p.Fset.File(f.Pos()).Name()
				if !strings.HasPrefix(name, root+string(filepath.Separator)) {
					continue // generated, in the build cache
				}
				fl, ok := classify(p.PkgPath, name, i == 1)
				if !ok {
					continue
				}
				r.scan(keys, fl, f, p.TypesInfo, pubIfaces)
			}
		}
	}

	// The Go code blocks of the README and of the Go guide are certified
	// as written by internal/outsider in a module of their own: outsider
	// code.
	if err := r.scanReadme(root, keys, mod, modIfaces); err != nil {
		return nil, err
	}

	r.propagate(keys, byKey)
	return r, nil
}

// scan records the references of one file: its identifiers, and the public
// interfaces its types implement (an implementation uses the interface's
// methods without naming them).
func (r *apiReport) scan(keys *keyer, fl file, f *ast.File, info *types.Info, pubIfaces []*types.TypeName) {
	// An Example function is shown to users, and so is the whole of a
	// file that holds one example and no tests, as go doc has it.
	var examples [][2]token.Pos
	tests := 0
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || !fl.test || fd.Recv != nil {
			continue
		}
		switch name := fd.Name.Name; {
		case strings.HasPrefix(name, "Example"):
			examples = append(examples, [2]token.Pos{fd.Pos(), fd.End()})
		case strings.HasPrefix(name, "Test"), strings.HasPrefix(name, "Benchmark"), strings.HasPrefix(name, "Fuzz"):
			tests++
		}
	}
	if len(examples) == 1 && tests == 0 {
		examples[0] = [2]token.Pos{f.FileStart, f.FileEnd}
	}
	inExample := func(pos token.Pos) bool {
		for _, e := range examples {
			if e[0] <= pos && pos < e[1] {
				return true
			}
		}
		return false
	}
	label := func(pos token.Pos) string {
		if inExample(pos) {
			return fl.pkg + " Example"
		}
		return fl.label
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			if key, owner := keys.key(info.Uses[n]); key != "" {
				r.usage(key).add(fl.classFor(owner, inExample(n.Pos())), label(n.Pos()))
			}
		case *ast.CallExpr:
			// A value passed where a public interface is expected (a
			// pgxpool.Pool for faults.DB) is an implementation of it
			// too: the callee calls its methods, which it has to have.
			for _, it := range implicitInterfaces(info, n) {
				key, owner := keys.key(it.Obj())
				c := fl.classFor(owner, inExample(n.Pos()))
				iface := it.Underlying().(*types.Interface)
				for i := range iface.NumExplicitMethods() {
					if mkey, _ := keys.key(iface.ExplicitMethod(i)); mkey != "" && key != "" {
						r.usage(mkey).add(c, label(n.Pos()))
					}
				}
			}
		case *ast.TypeSpec:
			tn, ok := info.Defs[n.Name].(*types.TypeName)
			if !ok || tn.IsAlias() || types.IsInterface(tn.Type()) || n.TypeParams != nil {
				return true
			}
			for _, it := range pubIfaces {
				iface := it.Type().Underlying().(*types.Interface)
				if !types.Implements(tn.Type(), iface) && !types.Implements(types.NewPointer(tn.Type()), iface) {
					continue
				}
				key, owner := keys.key(it)
				c := fl.classFor(owner, false)
				r.usage(key).add(c, label(n.Pos()))
				for i := range iface.NumExplicitMethods() {
					if mkey, _ := keys.key(iface.ExplicitMethod(i)); mkey != "" {
						r.usage(mkey).add(c, label(n.Pos()))
					}
				}
			}
		}
		return true
	})
}

// implicitInterfaces returns the named interface types of call's
// parameters that receive an argument of another type: a value the call
// converts to the interface, so that the callee calls its methods.
func implicitInterfaces(info *types.Info, call *ast.CallExpr) []*types.Named {
	sig, ok := info.TypeOf(call.Fun).(*types.Signature)
	if !ok {
		return nil // a conversion or a builtin
	}
	var out []*types.Named
	for i, arg := range call.Args {
		var pt types.Type
		switch n := sig.Params().Len(); {
		case sig.Variadic() && i >= n-1 && !call.Ellipsis.IsValid():
			pt = sig.Params().At(n - 1).Type().(*types.Slice).Elem()
		case i < n:
			pt = sig.Params().At(i).Type()
		default:
			continue
		}
		named, ok := types.Unalias(pt).(*types.Named)
		at := info.TypeOf(arg)
		if !ok || !types.IsInterface(named) || at == nil || types.Identical(at, pt) {
			continue
		}
		out = append(out, named)
	}
	return out
}

// guides are the pages whose Go code blocks internal/outsider certifies as
// written.
var guides = []string{"README.md", "docs/go.md"}

// scanReadme type-checks the Go code blocks of the guides against the
// packages the module load found and records their references.
func (r *apiReport) scanReadme(root string, keys *keyer, mod []*packages.Package, pubIfaces []*types.TypeName) error {
	// Imports resolve to the module's non-test packages first, then to
	// whatever else the load holds (Ginkgo, Gomega, pgxpool...).
	byPath := map[string]*types.Package{}
	var nonTest, all []*types.Package
	for _, p := range mod {
		if p.ID == p.PkgPath {
			nonTest = append(nonTest, p.Types)
		}
		all = append(all, p.Types)
	}
	for _, set := range [][]*types.Package{closure(nonTest), closure(all)} {
		for _, tp := range set {
			if byPath[tp.Path()] == nil {
				byPath[tp.Path()] = tp
			}
		}
	}
	imp := importerFunc(func(path string) (*types.Package, error) {
		if tp := byPath[path]; tp != nil {
			return tp, nil
		}
		return nil, fmt.Errorf("%s is imported by no package of the module", path)
	})
	for _, guide := range guides {
		text, err := os.ReadFile(filepath.Join(root, guide))
		if err != nil {
			return err
		}
		if err := r.scanBlocks(guide, string(text), imp, keys, pubIfaces); err != nil {
			return err
		}
	}
	return nil
}

// scanBlocks type-checks the Go code blocks of text, the guide called
// guide, with imp and records their references.
func (r *apiReport) scanBlocks(guide, text string, imp types.Importer, keys *keyer, pubIfaces []*types.TypeName) error {
	blocks := strings.Split(text, "\n```go\n")
	for i, b := range blocks[1:] {
		code, _, _ := strings.Cut(b, "\n```")
		if !strings.HasPrefix(code, "package ") {
			continue // a fragment, not a file
		}
		fset := token.NewFileSet()
		name := fmt.Sprintf("%s, Go block %d", guide, i+1)
		f, err := parser.ParseFile(fset, name, code, 0)
		if err != nil {
			return err
		}
		info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}}
		var errs []error
		conf := types.Config{Importer: imp, Error: func(err error) { errs = append(errs, err) }}
		_, _ = conf.Check(f.Name.Name, fset, []*ast.File{f}, info)
		if len(errs) > 0 {
			return fmt.Errorf("%s does not type-check, so its references cannot be counted: %w", name, errors.Join(errs...))
		}
		r.scan(keys, file{area: areaReadme, pkg: guide, label: guide, test: true}, f, info, pubIfaces)
		r.readme++
	}
	return nil
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// propagate marks as outsider-used the exported types that the type of an
// outsider-used export names: a caller of suite.Run gets its options and
// its result without naming their types, which cannot be unexported while
// suite.Run is public. A struct type passes on only its encoded fields'
// types (the others count on their own); an interface passes on its
// methods' signatures, since an implementer writes them.
func (r *apiReport) propagate(keys *keyer, byKey map[string]types.Object) {
	var work []string
	for key, u := range r.uses {
		if len(u.by[outsider]) > 0 {
			work = append(work, key)
		}
	}
	slices.Sort(work)
	for len(work) > 0 {
		from := work[0]
		work = work[1:]
		obj := byKey[from]
		if obj == nil {
			continue
		}
		seen := map[types.Type]bool{}
		var walk func(t types.Type)
		walk = func(t types.Type) {
			if t == nil || seen[t] {
				return
			}
			seen[t] = true
			switch t := t.(type) {
			case *types.Alias:
				walk(types.Unalias(t))
			case *types.Named:
				if key, _ := keys.key(t.Origin().Obj()); key != "" {
					if u := r.usage(key); !u.usedOutside() {
						u.via = from
						work = append(work, key)
					}
				}
				for i := range t.TypeArgs().Len() {
					walk(t.TypeArgs().At(i))
				}
			case *types.Pointer:
				walk(t.Elem())
			case *types.Slice:
				walk(t.Elem())
			case *types.Array:
				walk(t.Elem())
			case *types.Chan:
				walk(t.Elem())
			case *types.Map:
				walk(t.Key())
				walk(t.Elem())
			case *types.Signature:
				walk(t.Params())
				walk(t.Results())
			case *types.Tuple:
				for i := range t.Len() {
					walk(t.At(i).Type())
				}
			case *types.Struct:
				for i := range t.NumFields() {
					walk(t.Field(i).Type())
				}
			case *types.Interface:
				for i := range t.NumMethods() {
					walk(t.Method(i).Type())
				}
			}
		}
		switch obj := obj.(type) {
		case *types.TypeName:
			if st, isStruct := obj.Type().Underlying().(*types.Struct); !isStruct {
				walk(obj.Type().Underlying())
			} else {
				for i := range st.NumFields() {
					if encoded(st.Tag(i)) {
						walk(st.Field(i).Type())
					}
				}
			}
		default:
			walk(obj.Type())
		}
	}
}

// keyer names the exports of public packages: each instance of a package
// (its own, its test variant's, the one export data gave the integrations
// module) has objects of its own, so references are matched by name.
type keyer struct {
	isPublic map[string]bool
	cache    map[*types.Package]map[types.Object]string
}

func newKeyer(isPublic map[string]bool) *keyer {
	return &keyer{isPublic: isPublic, cache: map[*types.Package]map[types.Object]string{}}
}

// key returns the name of obj if it is an export of a public package, and
// that package's relative path.
func (k *keyer) key(obj types.Object) (key, owner string) {
	if obj == nil || obj.Pkg() == nil || !k.isPublic[obj.Pkg().Path()] {
		return "", ""
	}
	switch o := obj.(type) {
	case *types.Func:
		obj = o.Origin()
	case *types.Var:
		obj = o.Origin()
	}
	owner, _ = relative(obj.Pkg().Path())
	return k.of(obj.Pkg())[obj], owner
}

// of returns the exports of one instance of a public package, with their
// names: package-level identifiers, and the methods and fields (not
// embedded ones) of its exported types.
func (k *keyer) of(tp *types.Package) map[types.Object]string {
	if m, ok := k.cache[tp]; ok {
		return m
	}
	m := map[types.Object]string{}
	k.cache[tp] = m
	rel, _ := relative(tp.Path())
	scope := tp.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		m[obj] = rel + "." + name
		tn, ok := obj.(*types.TypeName)
		if !ok || tn.IsAlias() {
			continue
		}
		named, ok := tn.Type().(*types.Named)
		if !ok {
			continue
		}
		for i := range named.NumMethods() {
			if meth := named.Method(i); meth.Exported() {
				m[meth] = rel + "." + name + "." + meth.Name()
			}
		}
		switch u := named.Underlying().(type) {
		case *types.Interface:
			for i := range u.NumExplicitMethods() {
				if meth := u.ExplicitMethod(i); meth.Exported() {
					m[meth] = rel + "." + name + "." + meth.Name()
				}
			}
		case *types.Struct:
			for i := range u.NumFields() {
				if f := u.Field(i); f.Exported() && !f.Embedded() && !encoded(u.Tag(i)) {
					m[f] = rel + "." + name + "." + f.Name()
				}
			}
		}
	}
	return m
}

// encoded reports whether a struct field's tag names it in JSON or YAML:
// such a field is the serialized format's (a certificate's, the exec
// protocol's), which users read whatever Go code names, so it is counted
// with its type rather than on its own.
func encoded(tag string) bool {
	_, json := reflect.StructTag(tag).Lookup("json")
	_, yaml := reflect.StructTag(tag).Lookup("yaml")
	return json || yaml
}

// classify says where a file of package pkgPath lies; false for a package
// of neither module.
func classify(pkgPath, name string, inIntegrations bool) (file, bool) {
	test := strings.HasSuffix(name, "_test.go")
	if inIntegrations {
		rel := strings.TrimSuffix(strings.TrimPrefix(pkgPath, module+"/"), "_test")
		return file{area: areaIntegration, pkg: rel, label: rel, test: test}, true
	}
	rel, ok := relative(strings.TrimSuffix(pkgPath, "_test"))
	if !ok {
		return file{}, false
	}
	label := rel
	if test {
		label += " tests"
	}
	switch {
	case rel == "internal/outsider" || strings.HasPrefix(rel, "internal/outsider/") || isExample(rel):
		return file{area: areaOutsider, pkg: rel, label: rel, test: test}, true
	case isMachinery(rel):
		return file{area: areaMachinery, pkg: rel, label: label, test: test}, true
	default:
		return file{area: areaPublic, pkg: rel, label: label, test: test}, true
	}
}

// relative returns path relative to the module's root ("." for the root).
func relative(path string) (string, bool) {
	if path == module {
		return ".", true
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	return rel, ok
}

// isMachinery reports whether the package at rel is the harness's own:
// under internal/ or cmd/.
func isMachinery(rel string) bool {
	return strings.HasPrefix(rel, "internal/") || strings.HasPrefix(rel, "cmd/")
}

// isExample reports whether the package at rel is one of examples/, the
// implementations shown to users (today in JavaScript and Python only).
func isExample(rel string) bool { return strings.HasPrefix(rel, "examples/") }

// closure returns the packages reachable from pkgs by their imports.
func closure(pkgs []*types.Package) []*types.Package {
	seen := map[*types.Package]bool{}
	var out []*types.Package
	var visit func(tp *types.Package)
	visit = func(tp *types.Package) {
		if tp == nil || seen[tp] {
			return
		}
		seen[tp] = true
		out = append(out, tp)
		for _, imp := range tp.Imports() {
			visit(imp)
		}
	}
	for _, tp := range pkgs {
		visit(tp)
	}
	return out
}

// interfaces returns the named, non-generic interfaces with methods that
// tp declares; only exported ones when exportedOnly.
func interfaces(tp *types.Package, exportedOnly bool) []*types.TypeName {
	var out []*types.TypeName
	scope := tp.Scope()
	for _, name := range scope.Names() {
		tn, ok := scope.Lookup(name).(*types.TypeName)
		if !ok || tn.IsAlias() || (exportedOnly && !tn.Exported()) {
			continue
		}
		named, ok := tn.Type().(*types.Named)
		if !ok || named.TypeParams().Len() > 0 {
			continue
		}
		if it, ok := named.Underlying().(*types.Interface); ok && it.NumMethods() > 0 {
			out = append(out, tn)
		}
	}
	return out
}

// publicInterfaces returns the exported interfaces of the public packages
// among pkgs and what they import, each instance once.
func publicInterfaces(pkgs []*types.Package, isPublic map[string]bool) []*types.TypeName {
	var out []*types.TypeName
	for _, p := range closure(pkgs) {
		if isPublic[p.Path()] {
			out = append(out, interfaces(p, true)...)
		}
	}
	return out
}

// typesOf returns the type-checked packages of pkgs.
func typesOf(pkgs []*packages.Package) []*types.Package {
	var out []*types.Package
	for _, p := range pkgs {
		if p.Types != nil {
			out = append(out, p.Types)
		}
	}
	return out
}

// iface is an interface that a method may satisfy, and who it stands for.
type iface struct {
	it *types.Interface
	by string
}

// index adds i to idx, under each of its methods' names.
func index(idx map[string][]iface, i iface) map[string][]iface {
	for j := range i.it.NumMethods() {
		name := i.it.Method(j).Name()
		idx[name] = append(idx[name], i)
	}
	return idx
}

// methodIndex returns the interfaces whose methods are a contract: the
// exported interfaces of pkgs outside the machinery, error, and the
// unnamed ones through which the errors package calls Unwrap, Is and As.
func methodIndex(pkgs []*types.Package) map[string][]iface {
	idx := map[string][]iface{}
	for _, tp := range pkgs {
		if rel, ok := relative(tp.Path()); ok && isMachinery(rel) {
			continue
		}
		for _, tn := range interfaces(tp, true) {
			idx = index(idx, iface{tn.Type().Underlying().(*types.Interface), tn.Name()})
		}
	}
	errType := types.Universe.Lookup("error").Type()
	idx = index(idx, iface{errType.Underlying().(*types.Interface), "error"})
	method := func(name string, params, results []types.Type) *types.Interface {
		vars := func(ts []types.Type) *types.Tuple {
			var vs []*types.Var
			for _, t := range ts {
				vs = append(vs, types.NewParam(token.NoPos, nil, "", t))
			}
			return types.NewTuple(vs...)
		}
		sig := types.NewSignatureType(nil, nil, nil, vars(params), vars(results), false)
		return types.NewInterfaceType([]*types.Func{types.NewFunc(token.NoPos, nil, name, sig)}, nil).Complete()
	}
	boolType, anyType := types.Typ[types.Bool], types.Universe.Lookup("any").Type()
	for _, it := range []*types.Interface{
		method("Unwrap", nil, []types.Type{errType}),
		method("Unwrap", nil, []types.Type{types.NewSlice(errType)}),
		method("Is", []types.Type{errType}, []types.Type{boolType}),
		method("As", []types.Type{anyType}, []types.Type{boolType}),
	} {
		idx = index(idx, iface{it, "errors"})
	}
	return idx
}

// satisfied returns who stands for the interfaces of idx that method m's
// type satisfies with m.
func satisfied(idx map[string][]iface, m *types.Func) []string {
	recv := m.Signature().Recv().Type()
	if ptr, ok := recv.(*types.Pointer); ok {
		recv = ptr.Elem()
	}
	if named, ok := recv.(*types.Named); ok && named.TypeParams().Len() > 0 {
		return nil // Implements is unspecified for generic types
	}
	var by []string
	for _, i := range idx[m.Name()] {
		if types.Implements(recv, i.it) || types.Implements(types.NewPointer(recv), i.it) {
			by = append(by, i.by)
		}
	}
	return by
}

// readRatchet returns the identifiers listed in the ratchet file.
func readRatchet(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(ratchetFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if listed[line] {
			t.Errorf("%s lists %s twice", ratchetFile, line)
		}
		listed[line] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return listed
}

func loadAnalysis(t *testing.T) *apiReport {
	t.Helper()
	r, err := analysis()
	if err != nil {
		t.Fatalf("analysing the public API: %v", err)
	}
	t.Logf("loading both modules and analysing them took %s (once per test binary)", r.took.Round(time.Millisecond))
	return r
}

// TestPublicAPIIsUsedByOutsiders checks that every export of a public
// package (the module's packages outside internal/, cmd/ and examples/
// with non-test code) serves harmless's users, so that the public API
// stays small (issue 23). An export is a package-level func, type, var or
// const, or an exported method or field of an exported type; embedded
// fields, and fields with a json or yaml tag (the certificate's and the
// exec protocol's formats, read as such), count with their type.
//
// An export of package P is used only inside the module, a violator, when
// no outsider references it. Outsiders are the code that uses harmless as
// a user does: the non-test code of the module's other public packages;
// the Example functions of the public packages' tests (go doc shows them,
// and the whole of a file with one example and no test); internal/outsider,
// whose tests and testdata consumers use harmless from a module of their
// own; README.md's Go code blocks, which it certifies; examples/ (no Go
// there today: its implementations speak the exec protocol); and the
// integrations module, all of it. References from P itself (its tests
// included), from the harness's machinery (internal/ and cmd/, tests
// included) and from the tests of other public packages do not count. So
// an export referenced only inside P, or by nothing (dead API), is a
// violator too.
//
// Three things count as references without naming the export, because
// outsiders cannot do without them: an outsider type that implements a
// public interface uses the interface and its methods; the exported types
// named by the type of an outsider-used export (suite.Run's option type,
// say) are reached through it; and a method that satisfies an exported
// interface of the standard library, another module or a public package
// (String, MarshalJSON, adapters.Implementation's Deliver), or that the
// errors package calls (Unwrap), is that interface's contract, not an
// export of its own. That contract is the only exemption for dead API: an
// identifier implementers need has an outsider that uses it (the reference
// adapter, the README, internal/outsider's consumers), so an unreferenced
// one is untested API. A method that satisfies only an interface of the
// machinery is used by the machinery.
//
// Today's violators are listed in testdata/harness-only-api.txt, a
// ratchet: a violator missing from it fails the test, and so does a line
// that no longer names a violator, so that the list only shrinks. The log
// gives, per package, the violators and exports, and the exports that
// outsiders use but only the module's other public packages among them
// (suite's use of faults): no violators, but no user's API either.
func TestPublicAPIIsUsedByOutsiders(t *testing.T) {
	r := loadAnalysis(t)
	listed := readRatchet(t)
	exported := map[string]bool{}
	var total, totalExports, totalLevel, totalLevelExports int
	for _, pkg := range r.public {
		all, level := r.violators(pkg)
		levelExports := 0
		for _, e := range r.exports[pkg] {
			exported[e.key] = true
			if e.level {
				levelExports++
			}
		}
		t.Logf("%s: %d of %d exports used only inside the module (package-level: %d of %d)", pkg, len(all), len(r.exports[pkg]), len(level), levelExports)
		if within := r.withinModule(pkg); len(within) > 0 {
			t.Logf("%s: %d more are used from outside only by the module's other public packages (%s)", pkg, len(within), strings.Join(within, ", "))
		}
		total += len(all)
		totalExports += len(r.exports[pkg])
		totalLevel += len(level)
		totalLevelExports += levelExports
		for _, key := range all {
			if !listed[key] {
				t.Errorf("%s, exported by package %s, is %s, and no outsider uses it: move it under internal/ or unexport it (%s only shrinks)", key, pkg, r.usage(key).why(), ratchetFile)
			}
		}
	}
	t.Logf("all %d public packages: %d of %d exports used only inside the module (package-level: %d of %d); Go blocks of %s read: %d", len(r.public), total, totalExports, totalLevel, totalLevelExports, strings.Join(guides, " and "), r.readme)
	for _, key := range sortedKeys(listed) {
		switch u := r.usage(key); {
		case !exported[key]:
			t.Errorf("%s names %s, which no public package exports any more: remove its line", ratchetFile, key)
		case u.usedOutside():
			t.Errorf("%s names %s, which outsiders now use (%s): remove its line", ratchetFile, key, outsiderUsers(u))
		}
	}
}

// TestPublicAPIDetectorClassifies scans a public package, a package of the
// machinery and a user's package, type-checked from source here, and
// checks that each export gets the class its references give it: used by
// the machinery only, inside its own package only, by nothing, or, through
// a value of another module passed where it is expected (a pgxpool.Pool
// for faults.DB), by the user.
func TestPublicAPIDetectorClassifies(t *testing.T) {
	sources := []struct{ path, file, src string }{
		{"example.com/driver", "driver.go", `package driver
type Conn struct{}
func (*Conn) Query() int { return 0 }
func New() *Conn { return &Conn{} }`},
		{module + "/pub", "pub.go", `package pub
type DB interface{ Query() int }
func Use(db DB) int { return db.Query() + OnlySelf }
func OnlyHarness() {}
const OnlySelf = 1
func Dead() {}`},
		{module + "/internal/m", "m.go", `package m
import "` + module + `/pub"
func F() { pub.OnlyHarness() }`},
		{module + "/internal/outsider/user", "user.go", `package user
import ("example.com/driver"; "` + module + `/pub")
func G() int { return pub.Use(driver.New()) }`},
	}
	fset, pkgs := token.NewFileSet(), map[string]*types.Package{}
	imp := importerFunc(func(path string) (*types.Package, error) {
		if p := pkgs[path]; p != nil {
			return p, nil
		}
		return nil, fmt.Errorf("%s is not among the sources", path)
	})
	keys := newKeyer(map[string]bool{module + "/pub": true})
	r := &apiReport{uses: map[string]*usage{}}
	for _, src := range sources {
		f, err := parser.ParseFile(fset, src.file, src.src, 0)
		if err != nil {
			t.Fatal(err)
		}
		info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}, Types: map[ast.Expr]types.TypeAndValue{}}
		tp, err := (&types.Config{Importer: imp}).Check(src.path, fset, []*ast.File{f}, info)
		if err != nil {
			t.Fatalf("%s: %v", src.path, err)
		}
		pkgs[src.path] = tp
		if fl, ok := classify(src.path, src.file, false); ok {
			r.scan(keys, fl, f, info, nil)
		}
	}
	for key, want := range map[string]string{
		"pub.OnlyHarness": "used only by the harness's machinery (internal/m)",
		"pub.OnlySelf":    "used only inside its own package",
		"pub.Dead":        "referenced by nothing: dead API",
	} {
		if u := r.usage(key); u.usedOutside() || u.why() != want {
			t.Errorf("%s: outsiders use it %v, %q; want not, %q", key, u.usedOutside(), u.why(), want)
		}
	}
	for _, key := range []string{"pub.Use", "pub.DB.Query"} {
		if u := r.usage(key); !u.usedOutside() || !u.by[outsider]["internal/outsider/user"] {
			t.Errorf("%s is not found used by internal/outsider/user: %s", key, u.why())
		}
	}
}

// outsiderUsers says who outside uses an export.
func outsiderUsers(u *usage) string {
	if len(u.by[outsider]) > 0 {
		return strings.Join(sortedKeys(u.by[outsider]), ", ")
	}
	return "through the type of " + u.via
}

// TestPublicAPIDetectorWorks is the control of TestPublicAPIIsUsedByOutsiders
// on the tree: exports known to be used from outside are not found
// harness-only, each source of outsider code having been read.
// TestPublicAPIDetectorClassifies is its control on code made for it,
// since the tree is meant to hold no harness-only export.
func TestPublicAPIDetectorWorks(t *testing.T) {
	r := loadAnalysis(t)
	violator := map[string]bool{}
	for _, pkg := range r.public {
		all, _ := r.violators(pkg)
		for _, key := range all {
			violator[key] = true
		}
	}
	for _, key := range []string{"suite.Run", "adapters.Adapter", "adapters.Implementation", "suite.Option"} {
		if violator[key] {
			t.Errorf("%s is found harness-only: %s", key, r.usage(key).why())
		}
	}
	// Each source of outsider code was read: a source that loads to
	// nothing would make its exports look harness-only.
	sources := map[string]bool{}
	for _, u := range r.uses {
		for label := range u.by[outsider] {
			switch {
			case strings.HasPrefix(label, "integrations/"):
				sources["integrations"] = true
			case strings.HasPrefix(label, "internal/outsider/testdata/"):
				sources["internal/outsider/testdata"] = true
			case strings.HasPrefix(label, "internal/outsider"):
				sources["internal/outsider"] = true
			case strings.HasSuffix(label, " Example"):
				sources["Example"] = true
			case slices.Contains(guides, label):
				sources["the guides"] = true
			default:
				sources["public packages"] = true
			}
		}
	}
	for _, s := range []string{"integrations", "internal/outsider/testdata", "internal/outsider", "Example", "the guides", "public packages"} {
		if !sources[s] {
			t.Errorf("no export is used by %s: its code was not read", s)
		}
	}
	if u := r.usage("suite.Run"); !u.by[outsider]["docs/go.md"] {
		t.Errorf("suite.Run's outsiders are %v; want docs/go.md, the Go guide, among them", sortedKeys(u.by[outsider]))
	}
	if u := r.usage("adapters.Adapter"); !u.by[outsider]["suite Example"] {
		t.Errorf("adapters.Adapter's outsiders are %v; want suite Example (ExampleRun) among them", sortedKeys(u.by[outsider]))
	}
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
